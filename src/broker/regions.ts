import { unavailable } from '../errors.ts';
import type { BrokerContext } from './context.ts';
import type { Wakeups } from './wakeups.ts';

/**
 * Regions (README.md, "Regions"): each region keeps its messages in its own Redis; a broker node serves
 * one region's endpoint (the local region) and talks to every region's Redis. Topics and
 * subscriptions are global: every region holds a full copy of the control plane, kept in step
 * by src/broker/control-plane.ts. With no region configuration there is one unnamed region and
 * the broker behaves exactly as a single-region broker.
 */
export class Region {
  /**
   * The control plane of this Redis was brought up to date since its connection (re)opened:
   * only then may this node use its data plane. A region that missed the creation of a
   * subscription while it was away must attach it before it stores another publish.
   */
  synced: boolean;
  /** The store was found in this broker's storage format (storage-guard.ts): until then, unused. */
  storageChecked = false;

  constructor(
    /** '' for the one region of a deployment without regions. */
    readonly name: string,
    readonly ctx: BrokerContext,
    readonly wakeups: Wakeups,
    /** False in a single-region deployment: there is nothing to catch up with. */
    readonly needsSync: boolean,
  ) {
    this.synced = !needsSync;
  }

  /** The connection is up (a command sent now is not refused before reaching Redis). */
  get connected(): boolean {
    return this.ctx.redis.status === 'ready';
  }

  /** Connected, and its store is one this broker may use: the control plane may read and write it. */
  get reachable(): boolean {
    return this.connected && this.storageChecked;
  }

  /** May serve messages, acks and control-plane reads. */
  get usable(): boolean {
    return this.storageChecked && (!this.needsSync || (this.synced && this.connected));
  }
}

export class Regions {
  /** Every region, in name order (the order control-plane writes go in). */
  readonly all: readonly Region[];
  readonly multiRegion: boolean;
  private readonly byNames: Map<string, Region>;
  /** The local region, then the others in name order. */
  private readonly localFirstOrder: readonly Region[];

  constructor(
    readonly local: Region,
    others: Region[] = [],
  ) {
    this.all = [local, ...others].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    this.multiRegion = others.length > 0;
    this.byNames = new Map(this.all.map((region) => [region.name, region]));
    this.localFirstOrder = [local, ...this.all.filter((region) => region !== local)];
  }

  byName(name: string): Region | undefined {
    return this.byNames.get(name);
  }

  /** The local region, or UNAVAILABLE: an endpoint never serves from another region's store instead. */
  requireLocal(): Region {
    if (!this.local.usable) throw unavailable(`The message store of region ${this.local.name} cannot be reached.`);
    return this.local;
  }

  /** Usable regions, the local one first, then in name order: where pulls look for messages. */
  localFirst(): Region[] {
    return this.localFirstOrder.filter((region) => region.usable);
  }

  /**
   * Where control-plane writes are decided: the first usable region in name order. Two writes
   * to one name through any endpoints meet there (compare-and-set), unless a partition hides
   * that region from one of them; then the versions settle it (see put-topic.lua).
   */
  arbiter(): Region {
    const region = this.all.find((candidate) => candidate.usable);
    if (!region) throw unavailable();
    return region;
  }
}
