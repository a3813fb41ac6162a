import { type AckFailureCode, exactlyOnceAckFailure, invalidArgument, notFound, unavailable } from '../errors.ts';
import {
  acknowledge,
  acknowledgeOrdered,
  type DeliveryOutcome,
  modifyAckDeadline,
  type SettleResult,
} from '../redis/calls/delivery.ts';
import type { AckIdCodec, Delivery } from './ack-id.ts';
import type { BrokerMetrics } from './metrics.ts';
import { resourceId } from './names.ts';
import { OutdatedRecord, type SubscriptionRecord } from './records.ts';
import type { Region, Regions } from './regions.ts';

/** Per-ack-ID results. `failures` is only ever filled on exactly-once subscriptions. */
export interface SettleOutcome {
  /** Ack IDs whose delivery the request changed (on other subscriptions: all well-formed ones). */
  applied: string[];
  failures: Map<string, AckFailureCode>;
}

/**
 * The deliveries behind ack IDs that this process issued and still tracks (what its streams have
 * outstanding), for one subscription: those need no decoding, since they are the very strings the
 * codec sealed.
 */
export type IssuedAckIds = (record: SubscriptionRecord) => (ackId: string) => Delivery | undefined;

const nothingIssued: IssuedAckIds = () => () => undefined;

/** What a settlement does, as Pub/Sub's metrics name it: an acknowledgement or a deadline change. */
type SettleOperation = 'ack' | 'modack';

/** Ack IDs and the deliveries they name (undefined: malformed, or another subscription's). */
export type DecodedAckIds = ReadonlyMap<string, Delivery | undefined>;

export function throwFailures(outcome: SettleOutcome): void {
  if (outcome.failures.size > 0) throw exactlyOnceAckFailure(outcome.failures);
}

/**
 * Settlement: acknowledgements and deadline changes (0 = nack) of leased messages, whether they
 * come from a unary request or a stream. An ack goes to the region its ack ID names.
 */
export class Settlement {
  private issued = nothingIssued;

  constructor(
    private readonly regions: Regions,
    /** The ack ID codec; its secret lives in Redis, so it is loaded on first use. */
    private readonly ackIds: () => Promise<AckIdCodec>,
    private readonly metrics: BrokerMetrics,
  ) {}

  /** Where settlement looks up ack IDs this process issued before decoding them (streams.ts). */
  recognizeIssued(issued: IssuedAckIds): void {
    this.issued = issued;
  }

  /**
   * Acknowledges deliveries and reports, per ack ID, what happened (see settle). `remembered`:
   * the record was remembered, not read for the call, and may be outdated (OutdatedRecord).
   */
  async acknowledgeDeliveries(
    record: SubscriptionRecord,
    ackIds: string[],
    remembered = false,
  ): Promise<SettleOutcome> {
    return this.settle(record, await this.deliveriesOf(record, ackIds, remembered), 'ack', (region, members) =>
      this.acknowledgeMembers(region, record, members, remembered),
    );
  }

  /**
   * Runs the acknowledge script of the subscription's kind on lease members ("seq:gen"): also how
   * a pull drops messages past the retention. `remembered`: as in acknowledgeDeliveries (see
   * versionChecked).
   */
  acknowledgeMembers(
    { ctx }: Region,
    record: SubscriptionRecord,
    members: string[],
    remembered = false,
  ): Promise<SettleResult> {
    const data = ctx.keys.topicData(record.topicUid);
    const sub = data.subscription(record.uid);
    const time = ctx.clock.scriptTime();
    const recordVersion = remembered ? record.version : undefined;
    return versionChecked(
      remembered,
      record.enableMessageOrdering
        ? acknowledgeOrdered(ctx.scripts, data, sub, {
            time,
            wakeChannel: ctx.keys.wakeChannel(record.topicUid),
            members,
            recordVersion,
          })
        : acknowledge(ctx.scripts, data, sub, { time, members, recordVersion }),
    );
  }

  /** Sets new deadlines (0 = nack) and reports, per ack ID, what happened (as acknowledgeDeliveries). */
  async modifyDeliveries(
    record: SubscriptionRecord,
    ackIds: string[],
    seconds: number,
    remembered = false,
  ): Promise<SettleOutcome> {
    return this.settle(record, await this.deliveriesOf(record, ackIds, remembered), 'modack', (region, members) =>
      this.modifyMembers(region, record, members, seconds, undefined, remembered),
    );
  }

  /**
   * Extends the leases of ack IDs to `seconds` from now, on any subscription as strictly as on an
   * exactly-once one: in each region only if every lease there is valid, and a failure per ack
   * ID that is not (ack-and-publish.ts). Takes the ack IDs decoded (deliveriesOf).
   */
  holdDeliveries(record: SubscriptionRecord, deliveries: DecodedAckIds, seconds: number): Promise<SettleOutcome> {
    return this.settle(
      record,
      deliveries,
      'modack',
      (region, members) => this.modifyMembers(region, record, members, seconds, 'hold'),
      true,
    );
  }

  /**
   * Acknowledges as acknowledgeDeliveries, but reports expired leases as failures on any
   * subscription. Takes the ack IDs decoded (deliveriesOf).
   */
  acknowledgeStrictly(record: SubscriptionRecord, deliveries: DecodedAckIds): Promise<SettleOutcome> {
    return this.settle(
      record,
      deliveries,
      'ack',
      (region, members) => this.acknowledgeMembers(region, record, members),
      true,
    );
  }

  /**
   * The deliveries ack IDs of the subscription name (undefined: malformed, or another's).
   * `remembered` (see acknowledgeDeliveries): an ack ID of another subscription uid may be one
   * of a newer incarnation of this one (OutdatedRecord).
   */
  async deliveriesOf(record: SubscriptionRecord, ackIds: string[], remembered = false): Promise<DecodedAckIds> {
    const codec = await this.ackIds();
    const issuedHere = this.issued(record);
    return new Map(
      ackIds.map((ackId) => {
        const delivery = issuedHere(ackId) ?? codec.decode(ackId);
        if (delivery && delivery.subscriptionUid !== record.uid && remembered) throw new OutdatedRecord();
        return [ackId, delivery?.subscriptionUid === record.uid ? delivery : undefined];
      }),
    );
  }

  /**
   * Leases this process made and still holds itself (what a pusher leased, a pull nobody
   * received, a stream's lease over its budget) are settled by their deliveries: no ack ID was
   * handed out, so there is none to seal and decode, and no stream to tell. A region that
   * cannot be reached fails the call after the others are applied.
   */
  acknowledgeLeased(record: SubscriptionRecord, deliveries: readonly Delivery[]): Promise<void> {
    return this.settleLeased(record, deliveries, 'ack', (region, members) =>
      this.acknowledgeMembers(region, record, members),
    );
  }

  /** New deadlines (0 = nack) for leases this process holds (see acknowledgeLeased). */
  modifyLeased(record: SubscriptionRecord, deliveries: readonly Delivery[], seconds: number): Promise<void> {
    return this.settleLeased(record, deliveries, 'modack', (region, members) =>
      this.modifyMembers(region, record, members, seconds),
    );
  }

  /**
   * Gives back leases that never reached a client (a pull answered to nobody, a stream's lease
   * over its budget, a push never sent): available again at once, and no delivery attempt of
   * the message.
   */
  releaseLeased(record: SubscriptionRecord, deliveries: readonly Delivery[]): Promise<void> {
    return this.settleLeased(record, deliveries, 'modack', (region, members) =>
      this.modifyMembers(region, record, members, 0, 'release'),
    );
  }

  private modifyMembers(
    { ctx }: Region,
    record: SubscriptionRecord,
    members: string[],
    seconds: number,
    mode?: 'release' | 'hold',
    remembered = false,
  ): Promise<SettleResult> {
    const sub = ctx.keys.topicData(record.topicUid).subscription(record.uid);
    return versionChecked(
      remembered,
      modifyAckDeadline(ctx.scripts, sub, {
        time: ctx.clock.scriptTime(),
        seconds,
        mode,
        wakeChannel: ctx.keys.wakeChannel(record.topicUid),
        members,
        recordVersion: remembered ? record.version : undefined,
      }),
    );
  }

  /**
   * Runs one script per region over the distinct deliveries of decoded ack IDs.
   * Exactly-once subscriptions get a per-ack-ID result: malformed, stale and expired IDs fail,
   * the valid ones still take effect, and a region that cannot be reached is a transient
   * failure of its IDs. Others ignore stale IDs, but a malformed ID refuses the whole request
   * before anything changes, and an unreachable region fails it after the others are applied.
   * `strict`: per ack ID as on exactly-once subscriptions, whatever the subscription.
   */
  private async settle(
    record: SubscriptionRecord,
    deliveries: DecodedAckIds,
    operation: SettleOperation,
    apply: (region: Region, members: string[]) => Promise<SettleResult>,
    strict = false,
  ): Promise<SettleOutcome> {
    const exactlyOnce = strict || record.enableExactlyOnceDelivery === true;
    const { outcome, byRegion } = this.byRegion(record, deliveries, exactlyOnce);
    let regionFailure: unknown;
    for (const [region, memberOf] of byRegion) {
      const members = [...new Set(memberOf.values())];
      let settled: SettleResult;
      try {
        settled = await this.applyIn(region, members, apply);
      } catch (error) {
        // Nothing changed (a remembered record is only used with one region): the caller reads the record.
        if (error instanceof OutdatedRecord) throw error;
        if (!exactlyOnce) regionFailure ??= error;
        else for (const ackId of memberOf.keys()) outcome.failures.set(ackId, 'TRANSIENT_FAILURE_OTHER');
        continue;
      }
      this.addOutcomes(outcome, region, record, memberOf, members, settled, exactlyOnce, operation);
    }
    this.warnOfFailures(record, outcome, operation);
    if (regionFailure) throw regionFailure;
    return outcome;
  }

  /** Counts the failed ack IDs of an outcome in the metrics (exactly-once warnings). */
  private warnOfFailures(record: SubscriptionRecord, outcome: SettleOutcome, operation: SettleOperation): void {
    for (const code of outcome.failures.values()) {
      this.metrics.exactlyOnceWarning(record, code === 'TRANSIENT_FAILURE_OTHER' ? 'server' : 'client', operation);
    }
  }

  /**
   * Counts what a script did in the metrics: acknowledgements, and leases found past their deadline
   * (on an exactly-once subscription such a call fails: an exactly-once warning instead).
   */
  private count(
    record: SubscriptionRecord,
    operation: SettleOperation,
    results: DeliveryOutcome[],
    exactlyOnce: boolean,
  ) {
    const taken = (result: DeliveryOutcome) => result === 'applied' || (!exactlyOnce && result === 'expired');
    if (operation === 'ack') this.metrics.acknowledged(record, results.filter(taken).length);
    if (!exactlyOnce) this.metrics.deadlinesExpired(record, results.filter((result) => result === 'expired').length);
  }

  /**
   * The region every ack ID that names a delivery names, when there is one such region and it
   * can be reached: a strict settlement there is one script (strictlyIn).
   */
  oneRegionOf(deliveries: DecodedAckIds): Region | undefined {
    const names = new Set([...deliveries.values()].flatMap((delivery) => (delivery ? [delivery.region] : [])));
    const region = names.size === 1 ? this.regions.byName([...names][0]) : undefined;
    return region?.usable ? region : undefined;
  }

  /**
   * A settlement as strict as holdDeliveries by one script in the one region of the deliveries
   * (oneRegionOf): the distinct lease members to run it on, whether some ack IDs name no delivery
   * (they fail, so the script must change nothing), and the outcome per ack ID from what it did
   * (an acknowledgement's, in the metrics).
   */
  strictlyIn(region: Region, record: SubscriptionRecord, deliveries: DecodedAckIds) {
    const { outcome, byRegion } = this.byRegion(record, deliveries, true);
    const memberOf = byRegion.get(region) ?? new Map<string, string>();
    const members = [...new Set(memberOf.values())];
    return {
      members,
      someInvalid: outcome.failures.size > 0,
      outcome: (settled: SettleResult): SettleOutcome => {
        this.addOutcomes(outcome, region, record, memberOf, members, settled, true, 'ack');
        this.warnOfFailures(record, outcome, 'ack');
        return outcome;
      },
    };
  }

  /**
   * The lease members of decoded ack IDs, per region (ack ID -> "seq:gen"), and an outcome with
   * the ack IDs that name none as failures (exactlyOnce; else such an ID refuses the request).
   */
  private byRegion(record: SubscriptionRecord, deliveries: DecodedAckIds, exactlyOnce: boolean) {
    const outcome: SettleOutcome = { applied: [], failures: new Map() };
    const byRegion = new Map<Region, Map<string, string>>();
    for (const [ackId, delivery] of deliveries) {
      const region = delivery ? this.regions.byName(delivery.region) : undefined;
      if (delivery && region) {
        const memberOf = byRegion.get(region) ?? new Map<string, string>();
        byRegion.set(region, memberOf.set(ackId, leaseMember(delivery)));
      } else if (exactlyOnce) outcome.failures.set(ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID');
      else throw invalidArgument(`Invalid ack ID: "${ackId.slice(0, 200)}" was not issued for ${record.name}.`);
    }
    return { outcome, byRegion };
  }

  /** Adds to `outcome`, per ack ID, what a script in `region` did to its member (and counts it). */
  private addOutcomes(
    outcome: SettleOutcome,
    region: Region,
    record: SubscriptionRecord,
    memberOf: ReadonlyMap<string, string>,
    members: string[],
    settled: SettleResult,
    exactlyOnce: boolean,
    operation: SettleOperation,
  ): void {
    const results = this.outcomes(region, record, members, settled);
    this.count(record, operation, results, exactlyOnce);
    const resultOf = new Map(members.map((member, i) => [member, results[i]]));
    for (const [ackId, member] of memberOf) {
      const result = resultOf.get(member);
      if (result === 'applied' || (!exactlyOnce && result !== 'out-of-order')) outcome.applied.push(ackId);
      else if (result === 'out-of-order') outcome.failures.set(ackId, 'TRANSIENT_FAILURE_UNORDERED_ACK_ID');
      else outcome.failures.set(ackId, 'PERMANENT_FAILURE_INVALID_ACK_ID');
    }
  }

  /** Settles leases this process holds (see acknowledgeLeased), one script per region. */
  private async settleLeased(
    record: SubscriptionRecord,
    deliveries: readonly Delivery[],
    operation: SettleOperation,
    apply: (region: Region, members: string[]) => Promise<SettleResult>,
  ): Promise<void> {
    const byRegion = new Map<Region, Set<string>>();
    for (const delivery of deliveries) {
      const region = this.regions.byName(delivery.region);
      if (!region) continue; // a region no longer configured: the lease runs out there
      byRegion.set(region, (byRegion.get(region) ?? new Set<string>()).add(leaseMember(delivery)));
    }
    let regionFailure: unknown;
    for (const [region, memberSet] of byRegion) {
      const members = [...memberSet];
      try {
        this.count(
          record,
          operation,
          this.outcomes(region, record, members, await this.applyIn(region, members, apply)),
          false,
        );
      } catch (error) {
        regionFailure ??= error;
      }
    }
    if (regionFailure) throw regionFailure;
  }

  private applyIn(
    region: Region,
    members: string[],
    apply: (region: Region, members: string[]) => Promise<SettleResult>,
  ): Promise<SettleResult> {
    if (!region.usable)
      return Promise.reject(unavailable(`The message store of region ${region.name} cannot be reached.`));
    return apply(region, members);
  }

  /**
   * What a script did to each member. The subscription missing from this region is NOT_FOUND;
   * missing from a remote region only (its topic deleted there first), the leases are gone.
   */
  private outcomes(
    region: Region,
    record: SubscriptionRecord,
    members: string[],
    settled: SettleResult,
  ): DeliveryOutcome[] {
    if (settled.kind !== 'no-subscription') return settled.outcomes;
    if (region === this.regions.local || !this.regions.multiRegion) throw notFound(resourceId(record.name));
    return members.map((): DeliveryOutcome => 'gone');
  }
}

const leaseMember = (delivery: Delivery) => `${delivery.seq}:${delivery.generation}`;

/**
 * A settlement script's result. Run with a remembered record's version, a script that found no
 * subscription (or newer settings) says the record may be outdated, and changed nothing.
 */
async function versionChecked(remembered: boolean, settling: Promise<SettleResult>): Promise<SettleResult> {
  const settled = await settling;
  if (remembered && settled.kind === 'no-subscription') throw new OutdatedRecord();
  return settled;
}
