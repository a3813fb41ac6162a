// Every Lua script documents its contract in a header (README.md, Design), and the header is
// checked against the body: key counts that only a filename states, and keys used but never
// declared, are exactly the bugs that break Redis Cluster (every key a script touches must be
// passed in KEYS and share one hash tag, src/redis/SCHEMA.md).
//
// For each file in src/lua except prelude.lua:
//   - it opens with a `--[[ ... ]]` header: "<name>: purpose", one line per KEYS[i], ARGV lines,
//     `Returns` and `Invariant`;
//   - every KEYS[n] the body uses is declared, and every declared KEYS[i] is used; a header
//     entry `KEYS[n..]` covers any index >= n and is what allows `#KEYS`, loops over KEYS and
//     `unpack(KEYS, ...)` in the body (and it must then be used that way);
//   - every literal ARGV[n] the body uses is declared (an `ARGV[n..]` entry covers >= n);
//   - every reply code the body answers (REPLY_*, DELIVERY_*) is named under `Returns` and
//     defined in prelude.lua, and the body returns no bare number where a code belongs;
// and the script names in SCRIPT_NAMES (src/redis/scripts.ts) and the files match one to one.
//
// The reply codes are defined once per side: `local REPLY_OK = 1` ... in prelude.lua, and the same
// names with the same values in src/redis/calls/codes.ts; checked to agree.
//
// Scripts are run only through their wrappers in src/redis/calls/ (no call of Scripts.run,
// runEncoded or runStaged with a script name elsewhere), and each wrapper is run here against a
// recording stand-in for Scripts: what it sends must match the header (as many KEYS and ARGV,
// distinct keys, all in one Redis Cluster slot), and every script must be sent by some wrapper.
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { BulkStrings } from '../../src/redis/binary-command.ts';
import * as codes from '../../src/redis/calls/codes.ts';
import {
  attachSubscription,
  deleteTopicData,
  dropSubscription,
  finishCleanup,
  markCleanup,
  putDataOwner,
  putProjectPolicy,
  putTopic,
  rescheduleExpiry,
} from '../../src/redis/calls/control-plane.ts';
import {
  acknowledge,
  acknowledgeOrdered,
  cancelForwarding,
  finishForwarding,
  modifyAckDeadline,
  pull,
  touchSubscription,
} from '../../src/redis/calls/delivery.ts';
import { acknowledgeAndPublish } from '../../src/redis/calls/ack-and-publish.ts';
import { countBacklog, indexHolds, readBacklog } from '../../src/redis/calls/backlog.ts';
import { type PublishCall, publish, STAGED_BODIES_MISSING } from '../../src/redis/calls/publish.ts';
import { PublishBatches } from '../../src/redis/calls/publish-batch.ts';
import { createSnapshot, dropSnapshot, expireLog, markLog, seek, settleLog } from '../../src/redis/calls/retention.ts';
import { Keys } from '../../src/redis/keys.ts';
import { SCRIPT_NAMES, type ScriptName, Scripts, listScriptFiles } from '../../src/redis/scripts.ts';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const LUA_DIR = `${ROOT}src/lua/`;

interface Header {
  purposeName?: string;
  keys: number[]; // single entries, in header order
  keysFrom?: number; // KEYS[n..]
  argv: number[];
  argvFrom?: number;
  argvNone: boolean;
  hasReturns: boolean;
  /** The text from `Returns` to `Invariant`. */
  returnsText: string;
  hasInvariant: boolean;
}

interface Script {
  file: string;
  name: string;
  source: string;
  header?: Header;
  headerText?: string;
  body: string;
}

function parseHeader(text: string): Header {
  const header: Header = {
    keys: [],
    argv: [],
    argvNone: false,
    hasReturns: false,
    returnsText: '',
    hasInvariant: false,
  };
  const lines = text.split('\n');
  const first = lines.find((line) => line.trim() !== '');
  const purpose = first && /^\s*([a-z0-9-]+):\s+\S/.exec(first);
  if (purpose) header.purposeName = purpose[1];
  for (const line of lines) {
    const entry = /^\s*(KEYS|ARGV)(?:\[(\d+)(\.\.)?\])?\s+(\S.*)?$/.exec(line);
    if (entry) {
      const [, kind, index, range, rest] = entry;
      if (index === undefined) {
        if (kind === 'ARGV' && /^none\b/i.test(rest ?? '')) header.argvNone = true;
        continue;
      }
      const n = Number(index);
      if (kind === 'KEYS') {
        if (range) header.keysFrom = n;
        else header.keys.push(n);
      } else if (range) header.argvFrom = n;
      else header.argv.push(n);
      continue;
    }
    if (/^\s*Returns\b/.test(line)) header.hasReturns = true;
    if (/^\s*Invariant\b/.test(line)) header.hasInvariant = true;
    if (header.hasReturns && !header.hasInvariant) header.returnsText += `${line}\n`;
  }
  return header;
}

/** Lua source without comments (strings in these scripts never contain "--"). */
function stripComments(lua: string): string {
  return lua.replace(/--\[(=*)\[[\s\S]*?\]\1\]/g, '').replace(/--.*$/gm, '');
}

function loadScript(file: string): Script {
  const source = readFileSync(`${LUA_DIR}${file}`, 'utf8');
  const name = file.replace(/\.lua$/, '');
  const match = /^--\[\[([\s\S]*?)\]\]/.exec(source);
  if (!match) return { file, name, source, body: stripComments(source) };
  return {
    file,
    name,
    source,
    header: parseHeader(match[1]),
    headerText: match[1],
    body: stripComments(source.slice(match[0].length)),
  };
}

/** Literal indexes, and whether the body indexes/counts/unpacks the table dynamically. */
function uses(body: string, table: 'KEYS' | 'ARGV') {
  const literal = new Set<number>();
  let dynamic = false;
  for (const m of body.matchAll(new RegExp(`\\b${table}\\[([^\\]]*)\\]`, 'g'))) {
    const index = m[1].trim();
    if (/^\d+$/.test(index)) literal.add(Number(index));
    else dynamic = true;
  }
  if (new RegExp(`#${table}\\b`).test(body)) dynamic = true;
  for (const m of body.matchAll(new RegExp(`unpack\\(\\s*${table}\\b\\s*(?:,\\s*(\\d+))?`, 'g'))) {
    dynamic = true;
    if (m[1] !== undefined) literal.add(Number(m[1]));
  }
  // A table passed along whole (e.g. to a helper) also counts as dynamic use.
  if (new RegExp(`[(,]\\s*${table}\\s*[,)]`).test(body)) dynamic = true;
  return { literal, dynamic };
}

/** The reply codes prelude.lua defines (`local REPLY_OK = 1`), by name. */
const luaCodes = Object.fromEntries(
  [
    ...stripComments(readFileSync(`${LUA_DIR}prelude.lua`, 'utf8')).matchAll(
      /^local ((?:REPLY|DELIVERY)_[A-Z_]+|GEN_EPOCH) = (-?\d+)\s*$/gm,
    ),
  ].map(([, name, value]) => [name, Number(value)]),
);

/** The reply codes a text names (REPLY_OK, DELIVERY_GONE, ...). */
const codeNames = (text: string) => new Set(text.match(/\b(?:REPLY|DELIVERY)_[A-Z_]+\b/g) ?? []);

const files = readdirSync(LUA_DIR)
  .filter((file) => file.endsWith('.lua') && file !== 'prelude.lua')
  .sort();
const scriptNames = files.map((file) => file.replace(/\.lua$/, '')).sort();
const scripts = files.map(loadScript);

t.test('SCRIPT_NAMES and src/lua match one to one', async (t) => {
  t.ok(files.length > 0, 'src/lua holds scripts');
  t.same([...SCRIPT_NAMES].sort(), scriptNames, 'every script name has a file and every file a name');
  t.equal(new Set(SCRIPT_NAMES).size, SCRIPT_NAMES.length, 'no script name is listed twice');
  t.same(listScriptFiles().sort(), files, 'listScriptFiles() sees the same files');
});

for (const script of scripts) {
  t.test(script.file, async (t) => {
    const header = script.header;
    t.ok(header, 'starts with a --[[ ... ]] header');
    if (!header) return;

    t.equal(header.purposeName, script.name, 'the header opens with "<script name>: purpose"');
    t.ok(header.keys.length > 0 || header.keysFrom !== undefined, 'lists its KEYS[i]');
    t.ok(
      header.argv.length > 0 || header.argvFrom !== undefined || header.argvNone,
      'lists its ARGV (or says "ARGV none")',
    );
    t.ok(header.hasReturns, 'documents what it Returns');
    t.ok(header.hasInvariant, 'states its Invariant');

    // Declared keys are 1..n without gaps or repeats, then optionally KEYS[n+1..].
    const expected = header.keys.map((_, i) => i + 1);
    t.same(header.keys, expected, 'KEYS entries are numbered 1, 2, 3, ... in order');
    if (header.keysFrom !== undefined) {
      t.equal(header.keysFrom, header.keys.length + 1, 'a KEYS[n..] entry follows the last single KEYS entry');
    }

    const keys = uses(script.body, 'KEYS');
    const declared = (n: number) => header.keys.includes(n) || (header.keysFrom !== undefined && n >= header.keysFrom);
    const undeclared = [...keys.literal].filter((n) => !declared(n)).sort((a, b) => a - b);
    t.same(undeclared, [], 'every KEYS[n] used in the body is declared in the header');
    const unused = header.keys.filter((n) => !keys.literal.has(n));
    t.same(unused, [], 'every KEYS[i] declared in the header is used in the body');
    if (header.keysFrom === undefined) {
      t.notOk(keys.dynamic, 'the body uses #KEYS / KEYS[var] / unpack(KEYS) only with a KEYS[n..] header entry');
    } else {
      t.ok(keys.dynamic, `KEYS[${header.keysFrom}..] is declared, so the body reaches those keys with #KEYS or a loop`);
    }

    const argv = uses(script.body, 'ARGV');
    const argvDeclared = (n: number) =>
      header.argv.includes(n) || (header.argvFrom !== undefined && n >= header.argvFrom);
    const argvUndeclared = [...argv.literal].filter((n) => !argvDeclared(n)).sort((a, b) => a - b);
    t.same(argvUndeclared, [], 'every literal ARGV[n] used in the body is declared in the header');
    const argvUnused = header.argv.filter((n) => !argv.literal.has(n));
    t.same(argvUnused, [], 'every single ARGV[i] declared in the header is used in the body');
    if (header.argvNone) {
      t.ok(argv.literal.size === 0 && !argv.dynamic, '"ARGV none" scripts use no ARGV');
    }
    t.same(
      header.argv,
      header.argv.map((_, i) => i + 1),
      'ARGV entries are numbered 1, 2, 3, ... in order',
    );
    if (header.argvFrom !== undefined && header.argv.length > 0) {
      t.equal(header.argvFrom, header.argv.length + 1, 'an ARGV[n..] entry follows the last single ARGV entry');
    }
    if (header.argvFrom === undefined && !argv.dynamic) {
      // fine: fixed argument list
    } else if (header.argvFrom === undefined) {
      t.fail('the body uses #ARGV / ARGV[var] / unpack(ARGV) without an ARGV[n..] header entry');
    }

    const named = codeNames(header.returnsText);
    const unnamed = [...codeNames(script.body)].filter((code) => !named.has(code));
    t.same(unnamed, [], 'every reply code the body uses is named under Returns');
    const unknown = [...named].filter((code) => !(code in luaCodes));
    t.same(unknown, [], 'every reply code named under Returns is defined in prelude.lua');
    t.notMatch(script.body, /\breturn\s*\{?\s*-?\d/, 'returns named codes, never a bare number');
  });
}

// ---- reply codes: prelude.lua and src/redis/calls/codes.ts agree ----

t.test('prelude.lua and src/redis/calls/codes.ts define the same reply codes and generation epoch', async (t) => {
  const typescript = Object.fromEntries(Object.entries(codes).filter(([, value]) => typeof value === 'number'));
  t.ok(Object.keys(luaCodes).length > 0, 'prelude.lua defines reply codes');
  t.same(luaCodes, typescript, 'the same names, with the same values');
  t.ok(
    readFileSync(`${LUA_DIR}publish.lua`, 'utf8').includes(`error_reply('publish: ${STAGED_BODIES_MISSING}')`),
    'publish.lua answers the error its wrapper matches when staged bodies are missing',
  );
});

// ---- wrappers: only they run scripts, and each sends what its header declares ----

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(`${path}/`);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

t.test('scripts are run only through their wrappers in src/redis/calls/', async (t) => {
  const wrappers = `${ROOT}src/redis/calls/`;
  const dirs = ['src/', 'routes/', 'test/helpers/', 'bench/'].map((dir) => `${ROOT}${dir}`);
  let wrapped = 0;
  for (const file of dirs.flatMap(sourceFiles)) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\.(?:run|runEncoded|runStaged)\(\s*'([a-z0-9-]+)'/g)) {
      if (file.startsWith(wrappers)) wrapped++;
      else t.fail(`${file.slice(ROOT.length)}:${text.slice(0, m.index).split('\n').length} runs ${m[1]} directly`);
    }
  }
  t.ok(wrapped >= SCRIPT_NAMES.length, `the wrappers run the scripts (${wrapped} calls)`);
});

/** What a wrapper sent: the script, its KEYS, and how many ARGV (bodies in the call included). */
interface Sent {
  name: ScriptName;
  keys: string[];
  argv: number;
}

/** A Scripts that records what it is asked to run and answers `reply`, without Redis. */
function recordingScripts(sent: Sent[], reply: unknown): Scripts {
  const record = async (name: ScriptName, keys: string[], args: unknown[]) => {
    sent.push({ name, keys, argv: args.length });
    return reply;
  };
  return Object.assign(Object.create(Scripts.prototype) as Scripts, {
    run: record,
    runForBuffers: record,
    runEncoded: async (name, keys, args, trailing) => {
      sent.push({ name, keys, argv: args.length + trailing.count });
      return reply;
    },
    // The bodies go to the staging key, not to the script.
    runStaged: record,
  } satisfies Pick<Scripts, 'run' | 'runForBuffers' | 'runEncoded' | 'runStaged'>);
}

/** The hash tag of a key (Redis Cluster hashes only that part, when there is one). */
function hashTag(key: string): string {
  const open = key.indexOf('{');
  const close = open < 0 ? -1 : key.indexOf('}', open + 1);
  return close > open + 1 ? key.slice(open + 1, close) : key;
}

interface WrapperCase {
  what: string;
  /** What the stand-in answers: a reply the script may give. */
  reply: unknown;
  /** KEYS beyond the header's single entries (a KEYS[n..] entry), ARGV beyond its single entries. */
  moreKeys?: number;
  moreArgv?: number;
  call: (scripts: Scripts) => Promise<unknown>;
}

const keys = new Keys('ps');
const data = keys.topicData('0123456789abcdef');
const sub = data.subscription('fedcba9876543210');
const time = '';
const wakeChannel = keys.wakeChannel('0123456789abcdef');
const members = ['1000:1', '1001:2'];
const publishCall = (staged: boolean, subscriptions: PublishCall['subscriptions']): PublishCall => ({
  time,
  publishTimeUs: 1_000_000,
  attachVersion: '1',
  wakeChannel,
  orderingKey: '',
  subscriptions,
  bodies: new BulkStrings([5, 7], { indexWidth: staged ? 3 : undefined }),
  staged,
  stagingKey: data.staging('test'),
});
const twoSubscriptions = [
  { uid: 'aaaaaaaaaaaaaaaa', ordered: false },
  { uid: 'bbbbbbbbbbbbbbbb', ordered: true },
];
const put = { mode: 'cas', expected: '', name: 'projects/p/x/y', json: '{}', version: 1, tombstone: false } as const;
const published = [codes.REPLY_OK, 1000, 1_000_000];
const settled = [codes.DELIVERY_APPLIED, codes.DELIVERY_GONE];

const wrapperCases: WrapperCase[] = [
  {
    what: 'publish, bodies in the call, two subscriptions',
    reply: published,
    moreKeys: 2 * 7, // seven per attached subscription
    moreArgv: 1 + 2, // no scheduled message (ARGV[13 + 2k]: 0), the bodies
    call: (scripts) => publish(scripts, data, publishCall(false, twoSubscriptions)),
  },
  {
    what: 'publish-batch: two publishes sent alike, two subscriptions',
    reply: [published, published],
    moreKeys: 10 + 2 * 7, // publish.lua's KEYS, once: ten, and seven per attached subscription
    // Per publish, its ARGV count and its 13 ARGV (no idempotency key, no scheduled message); the
    // bodies (2 each).
    moreArgv: 2 * (1 + 13) + 2 * 2,
    call: (scripts) => {
      const batches = new PublishBatches(scripts);
      const sentAlike = {};
      // Of two ordering keys: each its own step.
      return Promise.all([
        batches.publish(data, publishCall(false, twoSubscriptions), sentAlike),
        batches.publish(data, { ...publishCall(false, twoSubscriptions), orderingKey: 'k' }, sentAlike),
      ]);
    },
  },
  {
    what: 'publish, staged bodies, two subscriptions',
    reply: published,
    moreKeys: 2 * 7,
    moreArgv: 1, // no scheduled message
    call: (scripts) => publish(scripts, data, publishCall(true, twoSubscriptions)),
  },
  {
    what: 'publish, a message scheduled for later, two subscriptions',
    reply: published,
    moreKeys: 2 * 9, // nine per attached subscription when the publish schedules a message
    moreArgv: 1 + 3 + 2, // one run of scheduled messages (first and last index, time), the bodies
    call: (scripts) =>
      publish(scripts, data, { ...publishCall(false, twoSubscriptions), scheduled: [{ index: 1, dueUs: 2_000_000 }] }),
  },
  {
    what: 'publish, staged bodies, no subscription',
    reply: published,
    moreArgv: 1, // no scheduled message
    call: (scripts) => publish(scripts, data, publishCall(true, [])),
  },
  {
    what: 'pull',
    reply: [codes.REPLY_OK, '', 0, 0, 2, 1000, 0, 1, '1000', 1, Buffer.from('body')],
    call: (scripts) =>
      pull(scripts, data, sub, {
        time,
        max: 10,
        leaseUs: 1_000_000,
        wakeChannel,
        maxBytes: 100,
        mayForward: true,
        inlineBytes: 100,
      }),
  },
  {
    what: 'acknowledge',
    reply: settled,
    moreArgv: members.length,
    call: (scripts) => acknowledge(scripts, data, sub, { time, members }),
  },
  {
    what: 'acknowledge-ordered',
    reply: settled,
    moreArgv: members.length,
    call: (scripts) => acknowledgeOrdered(scripts, data, sub, { time, wakeChannel, members }),
  },
  {
    what: 'modify-ack-deadline',
    reply: settled,
    moreArgv: members.length,
    call: (scripts) => modifyAckDeadline(scripts, sub, { time, seconds: 10, wakeChannel, members }),
  },
  {
    what: 'acknowledge-and-publish, acknowledge-ordered and two publishes',
    reply: [codes.REPLY_OK, settled, published, published],
    // The steps' keys not among KEYS[1..4], each once: acknowledge-ordered's bodies prefix, refs,
    // ready list, key states, holds and hold blocks, then publish's other eight and seven per
    // attached subscription.
    moreKeys: 6 + 8 + 2 * 7,
    // The deliveries; the acknowledgement's script and step (its key count, 10 positions, its ARGV
    // count, 3 + 2 ARGV, its body count); the publish count; each publish's step (key count, 24
    // positions, ARGV count, 13 ARGV, body count); the bodies (2 each).
    moreArgv: members.length + 1 + (1 + 10 + 1 + 5 + 1) + 1 + 2 * (1 + 24 + 1 + 13 + 1) + 2 * 2,
    call: (scripts) =>
      acknowledgeAndPublish(scripts, data, sub, {
        time,
        members,
        refuse: false,
        ordered: true,
        wakeChannel,
        publishes: [publishCall(false, twoSubscriptions), publishCall(false, twoSubscriptions)],
      }),
  },
  {
    what: 'finish-forwarding',
    reply: codes.REPLY_OK,
    moreArgv: members.length,
    call: (scripts) => finishForwarding(scripts, data, sub, { wakeChannel, members }),
  },
  {
    what: 'cancel-forwarding',
    reply: codes.REPLY_OK,
    moreArgv: members.length,
    call: (scripts) => cancelForwarding(scripts, sub, { wakeChannel, claimUs: 0, members }),
  },
  {
    what: 'touch-subscription',
    reply: codes.REPLY_OK,
    call: (scripts) => touchSubscription(scripts, sub, { time }),
  },
  {
    what: 'attach-subscription',
    reply: codes.REPLY_OK,
    moreArgv: 4, // two config field/value pairs
    call: (scripts) =>
      attachSubscription(scripts, data, {
        time,
        subscriptionUid: 'fedcba9876543210',
        ordered: false,
        version: 1,
        config: ['ackDeadlineUs', '10000000', 'ordered', '0'],
      }),
  },
  {
    what: 'drop-subscription',
    reply: 0,
    call: (scripts) => dropSubscription(scripts, data, { subscriptionUid: 'fedcba9876543210', batch: 10 }),
  },
  { what: 'delete-topic-data', reply: codes.REPLY_OK, call: (scripts) => deleteTopicData(scripts, data) },
  {
    what: 'put-topic',
    reply: [codes.REPLY_OK, ''],
    call: (scripts) => putTopic(scripts, keys, '0123456789abcdef', { ...put, time, retentionUs: 600_000_000 }),
  },
  {
    what: 'put-data-owner',
    reply: [codes.REPLY_REFUSED, '{}'],
    call: (scripts) =>
      putDataOwner(scripts, keys, 'subscription', '0123456789abcdef', { ...put, time, expiresAfterUs: 86_400_000_000 }),
  },
  {
    what: 'put-data-owner',
    reply: [codes.REPLY_OK, ''],
    call: (scripts) =>
      putDataOwner(scripts, keys, 'snapshot', '0123456789abcdef', { ...put, time, expiresAfterUs: undefined }),
  },
  {
    what: 'reschedule-expiry',
    reply: codes.REPLY_REFUSED,
    call: (scripts) =>
      rescheduleExpiry(scripts, keys, 'subscription', { name: 'projects/p/x/y', judged: '{}', dueUs: 1 }),
  },
  {
    what: 'put-project-policy',
    reply: [codes.REPLY_OK, ''],
    call: (scripts) => putProjectPolicy(scripts, keys, put),
  },
  {
    what: 'mark-cleanup',
    reply: codes.REPLY_OK,
    call: (scripts) => markCleanup(scripts, keys, { time, ref: 'a/b/c' }),
  },
  { what: 'finish-cleanup', reply: codes.REPLY_OK, call: (scripts) => finishCleanup(scripts, keys, { ref: 'a/b/c' }) },
  {
    what: 'seek',
    reply: [codes.REPLY_OK, 3],
    call: (scripts) =>
      seek(scripts, data, 'fedcba9876543210', {
        time,
        target: { timeUs: 1_000_000 },
        filtered: true,
        earlierSelections: data.earlierSelections('a'),
        wakeChannel,
      }),
  },
  {
    what: 'seek',
    reply: [codes.REPLY_NO_SNAPSHOT],
    moreKeys: 2, // the snapshot's held messages and info
    call: (scripts) =>
      seek(scripts, data, 'fedcba9876543210', {
        time,
        target: { snapshot: data.snapshot('0123456789abcdef') },
        filtered: false,
        earlierSelections: data.earlierSelections('b'),
        wakeChannel,
      }),
  },
  {
    what: 'create-snapshot',
    reply: [codes.REPLY_OK, 2, '1700000000000000', '1700000000000001'],
    call: (scripts) =>
      createSnapshot(scripts, data, {
        time,
        subscriptionUid: 'fedcba9876543210',
        snapshot: data.snapshot('0123456789abcdef'),
        maxLifeUs: 1_000_000,
      }),
  },
  {
    what: 'read-backlog',
    reply: [codes.REPLY_OK, 1, '', '', '', 'r', '1000', '0', '1000', 'a', 0, ''],
    call: (scripts) =>
      readBacklog(scripts, sub, {
        streams: ['r', 'k'],
        after: { stream: 'r', a: '1001', b: '0' },
        budget: 10,
        orderingKey: '',
      }),
  },
  {
    what: 'count-backlog',
    reply: [codes.REPLY_OK, 1700000001000000, 3, 1, 0, '1700000000000000', codes.REPLY_NO_SUBSCRIPTION, 0, 0, ''],
    moreKeys: 2, // one prefix per subscription counted
    moreArgv: 9, // the names of the keys it reads after each prefix
    call: (scripts) =>
      countBacklog(
        scripts,
        data,
        [data.subscriptionPrefix('fedcba9876543210'), data.subscriptionPrefix('0123456789abcdef')],
        time,
      ),
  },
  {
    what: 'index-holds',
    reply: codes.REPLY_OK,
    call: (scripts) => indexHolds(scripts, sub),
  },
  {
    what: 'drop-snapshot',
    reply: 0,
    call: (scripts) => dropSnapshot(scripts, data, { snapshot: data.snapshot('0123456789abcdef'), batch: 5 }),
  },
  {
    what: 'settle-log',
    reply: codes.REPLY_OK,
    call: (scripts) =>
      settleLog(scripts, keys, { topicUid: '0123456789abcdef', judgedUs: 5, nextUs: 600_000_005, retains: true }),
  },
  {
    what: 'mark-log',
    reply: codes.REPLY_OK,
    call: (scripts) => markLog(scripts, keys, { time, topicUid: '0123456789abcdef' }),
  },
  {
    what: 'expire-log',
    reply: [codes.REPLY_OK, 1, 0, 1, '600000000'],
    moreKeys: 2, // the selections of two attached subscriptions
    call: (scripts) =>
      expireLog(scripts, data, {
        time,
        topicRetentionUs: 600_000_000,
        subscriptionUids: ['aaaaaaaaaaaaaaaa', 'bbbbbbbbbbbbbbbb'],
        batch: 20,
      }),
  },
];

t.test('each wrapper sends its script the KEYS and ARGV its header declares', async (t) => {
  const byName = new Map(scripts.map((script) => [script.name, script]));
  const covered = new Set<string>();
  for (const { what, reply, moreKeys = 0, moreArgv = 0, call } of wrapperCases) {
    const sent: Sent[] = [];
    await call(recordingScripts(sent, reply));
    t.equal(sent.length, 1, `${what}: runs one script`);
    const [{ name, keys, argv }] = sent;
    covered.add(name);
    const header = byName.get(name)?.header;
    if (!header) {
      t.fail(`${what}: runs ${name}, which has no header`);
      continue;
    }
    if (moreKeys > 0) t.not(header.keysFrom, undefined, `${what}: ${name} declares KEYS[n..]`);
    t.equal(keys.length, header.keys.length + moreKeys, `${what}: passes ${header.keys.length + moreKeys} KEYS`);
    t.equal(new Set(keys).size, keys.length, `${what}: no key twice`);
    t.equal(new Set(keys.map(hashTag)).size, 1, `${what}: every key in one cluster slot`);
    if (moreArgv > 0) t.not(header.argvFrom, undefined, `${what}: ${name} declares ARGV[n..]`);
    t.equal(argv, header.argv.length + moreArgv, `${what}: passes ${header.argv.length + moreArgv} ARGV`);
  }
  t.same([...covered].sort(), [...SCRIPT_NAMES].sort(), 'every script is run by a wrapper checked here');
});
