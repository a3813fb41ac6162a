// Every Lua script documents its contract in a header, and the header is checked against the
// body (DESIGN.md, "Codebases to learn from": key counts that only a filename states, and keys
// used but never declared, are exactly the bugs that break Redis Cluster).
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
// The reply codes are defined once per side: `local REPLY_OK = 1` ... in prelude.lua, and the
// same names with the same values in src/redis/calls/codes.ts; checked to agree.
// A last check reads the TypeScript call sites of scripts.run/runEncoded/runStaged('<literal
// name>', [...] or a `const` array declared before the call) in src/ and routes/ and compares
// the number of KEYS they pass with the header.
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import * as codes from '../../src/redis/calls/codes.ts';
import { STAGED_BODIES_MISSING } from '../../src/redis/calls/publish.ts';
import { SCRIPT_NAMES, listScriptFiles } from '../../src/redis/scripts.ts';

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
      /^local ((?:REPLY|DELIVERY)_[A-Z_]+) = (-?\d+)\s*$/gm,
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

t.test('prelude.lua and src/redis/calls/codes.ts define the same reply codes', async (t) => {
  const typescript = Object.fromEntries(Object.entries(codes).filter(([, value]) => typeof value === 'number'));
  t.ok(Object.keys(luaCodes).length > 0, 'prelude.lua defines reply codes');
  t.same(luaCodes, typescript, 'the same names, with the same values');
  t.ok(
    readFileSync(`${LUA_DIR}publish.lua`, 'utf8').includes(`error_reply('publish: ${STAGED_BODIES_MISSING}')`),
    'publish.lua answers the error its wrapper matches when staged bodies are missing',
  );
});

// ---- call sites: the number of KEYS passed matches the header ----

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = `${dir}${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(`${path}/`);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** Splits the text of an array literal starting at `open` ('[') into top-level elements. */
function arrayElements(text: string, open: number): string[] | undefined {
  const elements: string[] = [];
  let depth = 0;
  let current = '';
  for (let i = open; i < text.length; i++) {
    const c = text[i];
    if ('[({'.includes(c)) {
      depth++;
      if (depth === 1) continue;
    } else if (')]}'.includes(c)) {
      depth--;
      if (depth === 0) {
        if (current.trim() !== '') elements.push(current.trim());
        return elements;
      }
    } else if (c === ',' && depth === 1) {
      elements.push(current.trim());
      current = '';
      continue;
    } else if (c === "'" || c === '"' || c === '`') {
      const end = text.indexOf(c, i + 1);
      if (end < 0) return undefined;
      current += text.slice(i, end + 1);
      i = end;
      continue;
    }
    current += c;
  }
  return undefined;
}

t.test('call sites pass as many KEYS as the header declares', async (t) => {
  const byName = new Map(scripts.map((script) => [script.name, script]));
  let checked = 0;
  for (const file of [...sourceFiles(`${ROOT}src/`), ...sourceFiles(`${ROOT}routes/`)]) {
    const text = readFileSync(file, 'utf8');
    const relative = file.slice(ROOT.length);
    for (const m of text.matchAll(/\.(?:run|runEncoded|runStaged)\(\s*'([a-z0-9-]+)'\s*,\s*(\[|[A-Za-z_]\w*)/g)) {
      const script = byName.get(m[1]);
      const header = script?.header;
      if (!header) {
        t.fail(`${relative}: runs unknown script ${m[1]}`);
        continue;
      }
      // KEYS written in the call, or in the closest `const <name> = [...]` before it.
      const declaration = m[2] === '[' ? undefined : text.lastIndexOf(`const ${m[2]} = [`, m.index);
      const arrayStart =
        declaration === undefined ? m.index! + m[0].length - 1 : declaration + `const ${m[2]} = `.length;
      const elements = declaration === -1 ? undefined : arrayElements(text, arrayStart);
      if (!elements) {
        t.fail(`${relative}: cannot read the KEYS array of the ${m[1]} call`);
        continue;
      }
      const fixed = elements.filter((e) => !e.startsWith('...')).length;
      const variadic = elements.some((e) => e.startsWith('...'));
      const line = text.slice(0, m.index).split('\n').length;
      const where = `${relative}:${line} ${m[1]}`;
      if (header.keysFrom === undefined) {
        t.notOk(variadic, `${where}: no spread KEYS for a script with a fixed key list`);
        t.equal(fixed, header.keys.length, `${where}: passes ${header.keys.length} KEYS`);
      } else {
        t.ok(
          fixed === header.keys.length,
          `${where}: passes the ${header.keys.length} fixed KEYS before the variadic ones`,
        );
      }
      checked++;
    }
  }
  t.ok(checked > 0, `found call sites (${checked}; calls with a computed script name are not checked)`);
});
