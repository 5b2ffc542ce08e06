/**
 * Seeded mutations of fixture inputs, for the fuzz tests here and the over-the-socket fuzz of a
 * running serve. Everything follows from one seed: FUZZ_SEED replays a whole run, and a case's
 * own generator comes from the seed and the case's index, so FUZZ_CASE replays one case alone.
 */

export interface Random {
  /** [0, 1). */
  next(): number;
  /** An integer in [0, n). */
  int(n: number): number;
  pick<T>(items: readonly T[]): T;
  chance(p: number): boolean;
}

/** mulberry32: small, fast and good enough to pick mutations. */
export function seededRandom(seed: number): Random {
  let state = seed >>> 0;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  return {
    next,
    int,
    pick: <T>(items: readonly T[]): T => {
      if (items.length === 0) throw new Error('mutate: nothing to pick from');
      return items[int(items.length)] as T;
    },
    chance: (p: number) => next() < p,
  };
}

/** The run's seed: FUZZ_SEED when set (to replay a run), else a fresh one. */
export function fuzzSeed(env: NodeJS.ProcessEnv = process.env): number {
  const given = env.FUZZ_SEED;
  if (given !== undefined && given !== '') {
    const seed = Number(given);
    if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) throw new Error('FUZZ_SEED must be an integer from 0 to 4294967295');
    return seed;
  }
  return Math.floor(Math.random() * 0xffffffff);
}

/** The cases to run: all of 0..count-1, or only FUZZ_CASE when set. */
export function fuzzCases(count: number, env: NodeJS.ProcessEnv = process.env): number[] {
  const only = env.FUZZ_CASE;
  if (only === undefined || only === '') return Array.from({ length: count }, (_, i) => i);
  const index = Number(only);
  if (!Number.isInteger(index) || index < 0 || index >= count) throw new Error(`FUZZ_CASE must be an integer from 0 to ${count - 1}`);
  return [index];
}

/** The generator of one case: independent of every other case, so a case replays alone. */
export function caseRandom(seed: number, index: number): Random {
  return seededRandom(Math.imul(seed ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(index + 1, 0xc2b2ae35));
}

/** How to replay a case, for a failure message. */
export function replay(seed: number, index: number): string {
  return `FUZZ_SEED=${seed} FUZZ_CASE=${index}`;
}

const HL7_SEPARATORS = ['|', '^', '~', '\\', '&', '\r'];
const SEGMENT_NAMES = ['MSH', 'PID', 'PV1', 'SCH', 'AIP', 'AIG', 'AIL', 'IN1', 'IN2', 'TQ1', 'ZIN', 'NTE', 'ERR', 'EVN', 'BHS', 'FHS'];
/** Text a sender may put anywhere: control characters, multi-byte and astral characters, escapes, HL7's null. */
const ODD_TEXT = ['\u0000', '\u000b', '\u001c', '\n', '\r\n', '\uFEFF', 'é', '日本', '\u{1F600}', '\uD800', '\\X41\\', '\\F\\', '\\', '""', ' ', 'MSH|^~\\&|'];

/**
 * One to three of: a character replaced, a separator deleted or doubled, the text cut short, a
 * huge field, a random segment inserted, a segment deleted or repeated.
 */
export function mutateHl7(text: string, random: Random): string {
  let out = text;
  const times = 1 + random.int(3);
  for (let i = 0; i < times; i++) out = random.pick(HL7_MUTATIONS)(out, random);
  return out;
}

type TextMutation = (text: string, random: Random) => string;

const at = (text: string, random: Random) => random.int(text.length + 1);

/** Positions of a set of characters in a text. */
function positionsOf(text: string, chars: readonly string[]): number[] {
  const found: number[] = [];
  for (let i = 0; i < text.length; i++) if (chars.includes(text.charAt(i))) found.push(i);
  return found;
}

const HL7_MUTATIONS: readonly TextMutation[] = [
  function replaceCharacter(text, random) {
    const i = random.int(Math.max(text.length, 1));
    const by = random.chance(0.5) ? random.pick(HL7_SEPARATORS) : random.chance(0.5) ? random.pick(ODD_TEXT) : String.fromCharCode(random.int(256));
    return text.slice(0, i) + by + text.slice(i + 1);
  },
  function deleteSeparator(text, random) {
    const positions = positionsOf(text, HL7_SEPARATORS);
    if (positions.length === 0) return text;
    const i = random.pick(positions);
    return text.slice(0, i) + text.slice(i + 1);
  },
  function doubleSeparator(text, random) {
    const positions = positionsOf(text, HL7_SEPARATORS);
    if (positions.length === 0) return text;
    const i = random.pick(positions);
    return text.slice(0, i) + text.charAt(i).repeat(1 + random.int(4)) + text.slice(i);
  },
  function truncate(text, random) {
    return text.slice(0, random.int(text.length + 1));
  },
  function hugeField(text, random) {
    const positions = positionsOf(text, ['|']);
    const i = positions.length > 0 ? random.pick(positions) + 1 : at(text, random);
    const unit = random.pick(['A', '9', '^', '~', '&', '\\', 'é', '\\E\\', 'X^Y~']);
    // Mostly tens of kilobytes; now and then a megabyte, as a stuck sender might write.
    const length = random.chance(0.02) ? 1 << 20 : 1000 + random.int(60000);
    return text.slice(0, i) + unit.repeat(Math.ceil(length / unit.length)) + text.slice(i);
  },
  function randomSegment(text, random) {
    const lines = text.split('\r');
    const fields = Array.from({ length: random.int(30) }, () => randomValue(random));
    lines.splice(random.int(lines.length + 1), 0, [random.chance(0.8) ? random.pick(SEGMENT_NAMES) : randomName(random), ...fields].join('|'));
    return lines.join('\r');
  },
  function dropOrRepeatSegment(text, random) {
    const lines = text.split('\r');
    const i = random.int(lines.length);
    if (random.chance(0.5)) lines.splice(i, 1);
    else lines.splice(i, 0, ...Array.from({ length: 1 + random.int(5) }, () => lines[i] ?? ''));
    return lines.join('\r');
  },
  function insertOddText(text, random) {
    const i = at(text, random);
    return text.slice(0, i) + random.pick(ODD_TEXT) + text.slice(i);
  },
];

function randomName(random: Random): string {
  const chars = 'ABCZ019 a|';
  return Array.from({ length: random.int(5) }, () => random.pick([...chars])).join('');
}

function randomValue(random: Random): string {
  return random.pick([
    '',
    '""',
    'SMITH^JOHN',
    '20240230',
    '19000101',
    '99999999999999',
    '1234567893',
    random.pick(ODD_TEXT),
    '^'.repeat(random.int(20)),
    '~'.repeat(random.int(20)),
    String(random.int(1_000_000)),
  ]);
}

/** A JSON value as JSON.parse gives it. */
export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/**
 * One to four of: a member deleted, a value replaced by one of another type or an odd one of the
 * same type, an array emptied or its items repeated, an unknown member added. The input is not
 * changed.
 */
export function mutateJson(value: Json, random: Random): Json {
  const copy = structuredClone(value);
  const times = 1 + random.int(4);
  let out: Json = copy;
  for (let i = 0; i < times; i++) out = mutateOnce(out, random);
  return out;
}

function mutateOnce(root: Json, random: Random): Json {
  const slots = slotsOf(root);
  if (slots.length === 0) return oddJson(random);
  const slot = random.pick(slots);
  const { parent, key } = slot;
  const current = Array.isArray(parent) ? parent[key as number] : parent[key as string];
  switch (random.int(5)) {
    case 0:
      if (Array.isArray(parent)) parent.splice(key as number, 1);
      else delete parent[key as string];
      break;
    case 1:
      set(parent, key, oddJson(random));
      break;
    case 2:
      set(parent, key, sameTypeOddity(current ?? null, random));
      break;
    case 3:
      if (Array.isArray(current)) set(parent, key, random.chance(0.5) ? [] : [...current, ...current]);
      else set(parent, key, [current ?? null]);
      break;
    default:
      if (!Array.isArray(parent)) parent[random.pick(['extra', 'unknownField', '__proto__', 'constructor', ''])] = oddJson(random);
      break;
  }
  return root;
}

type Container = Json[] | { [key: string]: Json };

function slotsOf(root: Json): Array<{ parent: Container; key: string | number }> {
  const slots: Array<{ parent: Container; key: string | number }> = [];
  const walk = (value: Json) => {
    if (Array.isArray(value)) {
      value.forEach((item, i) => {
        slots.push({ parent: value, key: i });
        walk(item);
      });
    } else if (value !== null && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        slots.push({ parent: value, key });
        walk(item);
      }
    }
  };
  walk(root);
  return slots;
}

function set(parent: Container, key: string | number, value: Json): void {
  if (Array.isArray(parent)) parent[key as number] = value;
  else parent[key as string] = value;
}

function oddJson(random: Random): Json {
  return random.pick<Json>([
    null,
    true,
    false,
    0,
    -1,
    1e308,
    0.1,
    '',
    ' ',
    'x'.repeat(1 + random.int(100_000)),
    '2024-02-30',
    '2024-02-30T25:61:00Z',
    'NaN',
    '\u0000',
    '\uD800',
    '日本\u{1F600}',
    [],
    {},
    [null],
    { nested: { deeper: [1, 'two', null] } },
  ]);
}

function sameTypeOddity(value: Json, random: Random): Json {
  if (typeof value === 'string') {
    return random.pick([
      '',
      ' ',
      value.toUpperCase(),
      value + value,
      value.slice(0, random.int(value.length + 1)),
      `${value}\u0000`,
      ` ${value} `,
      // A thousand times, up to a megabyte: a value repeated once already would pass the longest string V8 holds.
      value.repeat(Math.max(1, Math.min(1000, Math.floor(2 ** 20 / Math.max(1, value.length))))),
    ]);
  }
  if (typeof value === 'number') return random.pick([0, -value, value * 1e12, value + 0.5, Number.MAX_SAFE_INTEGER + 2, -0]);
  if (typeof value === 'boolean') return !value;
  return oddJson(random);
}
