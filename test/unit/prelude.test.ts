// Each script gets the part of prelude.lua it uses: the definitions it names, and those they name
// in turn (in the prelude's order), and nothing else.

import { readFileSync } from 'node:fs';
import t from 'tap';
import { packagePath } from '../../src/paths.ts';
import { preludeFor } from '../../src/redis/prelude.ts';
import { readScriptSource, SCRIPT_NAMES } from '../../src/redis/scripts.ts';

const LINES = [
  '-- a comment',
  'local A, B = 1, 2',
  'local unused_table = { 1 }',
  '',
  '-- uses A',
  'local function first(x)',
  '  -- an indented comment',
  '  return x + A',
  'end',
  'local function second(x)',
  '  return first(x) * 2',
  'end',
  'local function lonely()',
  '  return B',
  'end',
  'local cache_a, cache_b',
];
const PRELUDE = LINES.join('\n');

t.test('keeps what the script names, and what that names, in order', async (t) => {
  const kept = preludeFor(PRELUDE, 'return second(3)');
  // A's line, then first and second (lines 6 to 12 of the prelude), without comments between.
  t.equal(kept, [LINES[1], ...LINES.slice(5, 12)].join('\n'));
});

t.test('a name is matched as a whole word', async (t) => {
  t.equal(preludeFor(PRELUDE, 'local seconds = 1\nreturn firstly'), '');
  t.match(preludeFor(PRELUDE, 'cache_b = 2'), /^local cache_a, cache_b$/);
});

t.test('a top-level line that is not a definition is refused', async (t) => {
  t.throws(() => preludeFor('print(1)', 'return 1'), /not a local definition/);
});

t.test('every script keeps every prelude definition it names', async (t) => {
  const prelude = readFileSync(packagePath('src', 'lua', 'prelude.lua'), 'utf8');
  const defined = [...prelude.matchAll(/^local function ([A-Za-z_][A-Za-z0-9_]*)/gm)].map((m) => m[1]);
  for (const name of SCRIPT_NAMES) {
    const source = readScriptSource(name);
    const kept = preludeFor(prelude, source);
    for (const fn of defined) {
      if (new RegExp(`\\b${fn}\\(`).test(source)) t.match(kept, `local function ${fn}(`, `${name} keeps ${fn}`);
    }
    t.ok(kept.length < prelude.length, `${name} leaves some of the prelude out`);
  }
});
