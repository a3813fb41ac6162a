// Randomized model-based test of seek, snapshots and retention, on a ManualClock: random
// publishes, pulls, acks, nacks, stale acks, advances of time (some past every lease's deadline,
// some past the retention), janitor passes, seeks to random times (a message's publish time
// exactly, between, before everything or after it), snapshots, seeks to one of them and
// deletes of them, on subscriptions with and without
// retainAckedMessages, exactly-once, ordering, a filter, and a topic retention that reaches back
// before the subscription existed. The model knows, for every message, whether it is
// acknowledged, leased, or past the retention (published more than the subscription's
// messageRetentionDuration ago, or the topic's when that is longer), and so:
//   - what a pull large enough for everything delivers: every unacknowledged, unleased message
//     within the retention (with ordering, a key only while nothing of it is leased, in order);
//   - what a seek to T does: every message it retains (unacknowledged; acknowledged too with
//     retainAckedMessages or the topic's retention) published at or after T is unacknowledged,
//     every other acknowledged, and every lease ends: its ack ID never acknowledges anything again;
//   - what a snapshot records: the messages unacknowledged when it was made (leased ones too),
//     and that everything published after it is the snapshot's; a seek to it makes exactly
//     those unacknowledged (within the retention), every other acknowledged, and ends every lease;
//   - a filtered subscription never gets a message its filter refuses, before or after a seek.
// Checked on every pull: the broker delivers exactly what the model allows.

import t from 'tap';
import { ManualClock } from '../../src/broker/clock.ts';
import { formatTimestampUs } from '../../src/broker/durations.ts';
import { b64, startBroker, type TestBroker, unb64 } from '../helpers/app.ts';
import { randomFromEnv } from '../helpers/random.ts';
import { redisTargets } from '../helpers/redis.ts';

const STEPS = 400;
const US = 1_000_000;
const ACK_DEADLINE_S = 60;
const RETENTION_S = 600;
/** The topic's retention, in the variant that has one: longer than the subscription's, so it decides. */
const TOPIC_RETENTION_S = 1200;
const P = '/v1/projects/p';
const KEYS = ['', '', 'a', 'b', 'c'];

interface Variant {
  name: string;
  retainAcked?: boolean;
  exactlyOnce?: boolean;
  ordered?: boolean;
  filtered?: boolean;
  topicRetention?: boolean;
}

const VARIANTS: Variant[] = [
  { name: 'plain' },
  { name: 'exactly-once', exactlyOnce: true },
  { name: 'retain acked', retainAcked: true },
  { name: 'retain acked, exactly-once', retainAcked: true, exactlyOnce: true },
  { name: 'retain acked, ordered', retainAcked: true, ordered: true },
  { name: 'ordered, exactly-once', ordered: true, exactlyOnce: true },
  { name: 'retain acked, filtered', retainAcked: true, filtered: true },
  { name: 'topic retention', topicRetention: true },
  { name: 'topic retention, filtered', topicRetention: true, filtered: true },
];

interface Message {
  text: string;
  key: string;
  publishUs: number;
  /** Whether the subscription takes it (its filter, and for the topic's retention: published before it existed). */
  matches: boolean;
  /** Published before the subscription existed: only the topic's retention makes it the subscription's. */
  early: boolean;
  acked: boolean;
  lease?: { ackId: string; deadlineUs: number };
}

for (const target of redisTargets()) {
  for (const variant of VARIANTS) {
    t.test(`${target.name}, ${variant.name}: seek and retention follow the model`, async (t) => {
      const random = randomFromEnv(t);
      const clock = new ManualClock(Date.UTC(2026, 0, 1) * 1000);
      let now = Date.UTC(2026, 0, 1) * 1000;
      const advance = (seconds: number) => {
        clock.advanceSeconds(seconds);
        now += Math.round(seconds * US);
      };
      const broker: TestBroker = await startBroker(t, { target, clock, name: 'seek-model' });
      const messages: Message[] = [];
      const byText = new Map<string, Message>();
      /** Ack IDs of leases that ended: they never acknowledge anything. */
      const ended: string[] = [];
      let published = 0;

      const topic = await broker.api(
        'PUT',
        `${P}/topics/model`,
        variant.topicRetention ? { messageRetentionDuration: `${TOPIC_RETENTION_S}s` } : {},
      );
      t.equal(topic.status, 200);
      const publish = async (early = false) => {
        const count = random.int(1, 4);
        const key = variant.ordered ? random.pick(KEYS) : '';
        const colour = random.chance(0.5) ? 'red' : 'blue';
        const texts = Array.from({ length: count }, () => `m${published++}`);
        const { status } = await broker.api('POST', `${P}/topics/model:publish`, {
          messages: texts.map((text) => ({
            data: b64(text),
            attributes: { colour },
            ...(key ? { orderingKey: key } : {}),
          })),
        });
        t.equal(status, 200, 'published');
        for (const text of texts) {
          const message: Message = {
            text,
            key,
            publishUs: now,
            matches: !variant.filtered || colour === 'red',
            early,
            acked: early,
          };
          messages.push(message);
          byText.set(text, message);
        }
      };
      if (variant.topicRetention) {
        for (let i = 0; i < 3; i++) await publish(true);
        advance(1);
      }
      const sub = await broker.api('PUT', `${P}/subscriptions/model`, {
        topic: 'projects/p/topics/model',
        ackDeadlineSeconds: ACK_DEADLINE_S,
        messageRetentionDuration: `${RETENTION_S}s`,
        ...(variant.retainAcked ? { retainAckedMessages: true } : {}),
        ...(variant.exactlyOnce ? { enableExactlyOnceDelivery: true } : {}),
        ...(variant.ordered ? { enableMessageOrdering: true } : {}),
        ...(variant.filtered ? { filter: 'attributes.colour = "red"' } : {}),
      });
      t.equal(sub.status, 200);

      // A message is kept for the longer of the subscription's and the topic's retention.
      const keptS = variant.topicRetention ? TOPIC_RETENTION_S : RETENTION_S;
      const retained = (m: Message) => m.matches && m.publishUs >= now - keptS * US;
      const leased = (m: Message) => m.lease !== undefined && m.lease.deadlineUs > now;
      const endLease = (m: Message) => {
        if (m.lease) ended.push(m.lease.ackId);
        m.lease = undefined;
      };
      const available = () => {
        const keyBusy = new Set(
          messages.filter((m) => variant.ordered && m.key && leased(m) && !m.acked).map((m) => m.key),
        );
        return messages.filter((m) => !m.acked && retained(m) && !leased(m) && !(m.key && keyBusy.has(m.key)));
      };

      const pullAll = async () => {
        // Expired leases end here: the pull delivers them again.
        for (const m of messages) if (m.lease && !leased(m)) endLease(m);
        const expected = available();
        const { body } = await broker.api('POST', `${P}/subscriptions/model:pull`, {
          maxMessages: 1000,
          returnImmediately: true,
        });
        const received: { ackId: string; message: { data: string } }[] = body.receivedMessages ?? [];
        const texts = received.map((r) => unb64(r.message.data));
        t.same([...texts].sort(), expected.map((m) => m.text).sort(), 'the pull delivers what the model allows');
        if (variant.ordered) {
          for (const key of new Set(texts.map((text) => byText.get(text)!.key).filter((key) => key))) {
            const ofKey = texts.filter((text) => byText.get(text)?.key === key);
            const inOrder = messages.filter((m) => m.key === key && ofKey.includes(m.text)).map((m) => m.text);
            t.same(ofKey, inOrder, `key ${key} in publish order`);
          }
        }
        received.forEach((r, i) => {
          const m = byText.get(texts[i]);
          if (m) m.lease = { ackId: r.ackId, deadlineUs: now + ACK_DEADLINE_S * US };
        });
      };

      const acknowledge = async () => {
        // With ordering, each key's leases are acknowledged oldest first (exactly-once insists);
        // the others at random.
        const prefixLength = new Map<string, number>();
        const chosen = messages.filter((m) => {
          if (!leased(m) || m.acked) return false;
          if (!variant.ordered || !m.key) return random.chance(0.5);
          if (!prefixLength.has(m.key)) prefixLength.set(m.key, random.int(0, 3));
          const left = prefixLength.get(m.key)!;
          prefixLength.set(m.key, left - 1);
          return left > 0;
        });
        if (chosen.length === 0) return;
        const { status } = await broker.api('POST', `${P}/subscriptions/model:acknowledge`, {
          ackIds: chosen.map((m) => m.lease!.ackId),
        });
        t.equal(status, 200, 'acknowledged');
        for (const m of chosen) {
          m.acked = true;
          m.lease = undefined;
        }
      };

      const nack = async () => {
        // With ordering, one message of a key at most: it takes the later ones of its key with it.
        const keysNacked = new Set<string>();
        const chosen = messages.filter((m) => {
          if (!leased(m) || m.acked || !random.chance(1 / 3)) return false;
          if (!variant.ordered || !m.key) return true;
          if (keysNacked.has(m.key)) return false;
          keysNacked.add(m.key);
          return true;
        });
        if (chosen.length === 0) return;
        const { status } = await broker.api('POST', `${P}/subscriptions/model:modifyAckDeadline`, {
          ackIds: chosen.map((m) => m.lease!.ackId),
          ackDeadlineSeconds: 0,
        });
        t.equal(status, 200, 'nacked');
        for (const m of chosen) {
          endLease(m);
          // A nacked keyed message takes the later leases of its key with it (the cascade).
          if (variant.ordered && m.key) {
            for (const later of messages.slice(messages.indexOf(m) + 1))
              if (later.key === m.key && leased(later)) endLease(later);
          }
        }
      };

      const staleAck = async () => {
        if (ended.length === 0) return;
        const ackId = random.pick(ended);
        const { status } = await broker.api('POST', `${P}/subscriptions/model:acknowledge`, { ackIds: [ackId] });
        // Ignored on other subscriptions (Pub/Sub's acknowledge does not say), refused on exactly-once ones.
        t.equal(status, variant.exactlyOnce ? 400 : 200, 'a stale ack ID');
      };

      /** The snapshots made and not deleted: what each held, and the first message published after it. */
      const snapshots = new Map<string, { held: Set<Message>; firstAfter: number }>();
      let snapshotsMade = 0;
      const snapshot = async () => {
        const id = `snap-${snapshotsMade++}`;
        const { status, body } = await broker.api('PUT', `${P}/snapshots/${id}`, {
          subscription: 'projects/p/subscriptions/model',
        });
        t.equal(status, 200, `snapshot: ${JSON.stringify(body)}`);
        snapshots.set(id, { held: new Set(messages.filter((m) => !m.acked)), firstAfter: messages.length });
      };

      const seekToSnapshot = async () => {
        if (snapshots.size === 0) return;
        const id = random.pick([...snapshots.keys()]);
        const { held, firstAfter } = snapshots.get(id)!;
        const { status, body } = await broker.api('POST', `${P}/subscriptions/model:seek`, {
          snapshot: `projects/p/snapshots/${id}`,
        });
        t.equal(status, 200, `seek to a snapshot: ${JSON.stringify(body)}`);
        messages.forEach((m, i) => {
          endLease(m);
          m.acked = !(held.has(m) || (i >= firstAfter && m.matches));
        });
      };

      const deleteSnapshot = async () => {
        if (snapshots.size === 0) return;
        const id = random.pick([...snapshots.keys()]);
        t.equal((await broker.api('DELETE', `${P}/snapshots/${id}`)).status, 200, 'snapshot deleted');
        snapshots.delete(id);
      };

      const seek = async () => {
        const choice = random.int(0, 3);
        const targetUs =
          choice === 0 && messages.length > 0
            ? random.pick(messages).publishUs
            : choice === 1
              ? now + random.int(0, 3) * US
              : choice === 2
                ? now - RETENTION_S * 2 * US
                : now - random.int(0, RETENTION_S) * US;
        const { status, body } = await broker.api('POST', `${P}/subscriptions/model:seek`, {
          time: formatTimestampUs(targetUs),
        });
        t.equal(status, 200, `seek: ${JSON.stringify(body)}`);
        const replays = variant.retainAcked || variant.topicRetention;
        for (const m of messages) {
          endLease(m);
          if (!retained(m)) continue;
          const wasTheirs = !m.acked || (replays && (!m.early || variant.topicRetention));
          if (m.publishUs >= targetUs) m.acked = !wasTheirs;
          else m.acked = true;
        }
      };

      for (let step = 0; step < STEPS; step++) {
        const roll = random.int(0, 99);
        if (roll < 22) await publish();
        else if (roll < 45) await pullAll();
        else if (roll < 60) await acknowledge();
        else if (roll < 67) await nack();
        else if (roll < 71) await staleAck();
        else if (roll < 77) await seek();
        else if (roll < 79) await snapshot();
        else if (roll < 81) await seekToSnapshot();
        else if (roll < 82) await deleteSnapshot();
        else if (roll < 86) await broker.app.broker.replay.expireLogs();
        else if (roll < 97) advance(random.int(1, 20));
        else advance(ACK_DEADLINE_S + random.int(0, RETENTION_S / 2));
      }
      await pullAll();
    });
  }
}
