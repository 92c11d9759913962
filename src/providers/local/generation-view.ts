// The client's schema as the local model generates from it: the same values allowed, with the
// upper bounds that let json-schema-faker write huge values brought down near the lower ones, and
// numbers and patterned strings written by generators of our own (faker's overflow on bounds
// near the largest double, and pad a patterned string with characters the pattern refuses).
import { define } from 'json-schema-faker';
import randexpModule from 'randexp';
import { SCHEMA_LIMITS } from '../json-schema-limits.js';
import { linearRegExp } from '../linear-regexp.js';
import type { JsonSchemaObject } from '../types.js';

// randexp is CommonJS whose module.exports is the class (its typings say `export default`).
const RandExp = randexpModule as unknown as typeof randexpModule.default;

/** How far past its lower bound a string or array may go (faker's own default is 10). */
const SLACK = 10;

/** Strings at least this long are written as words. */
const WORDY = 32;

interface Random {
  next(): number;
}
type Node = Record<string, unknown>;

const finite = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);

/** A number within the node's bounds, multipleOf and integrality, or undefined when none is found. */
export function numberWithin(s: Node, random: Random): number | undefined {
  const integer =
    s.type === 'integer' || (Array.isArray(s.type) && !s.type.includes('number') && s.type.includes('integer'));
  let lower = finite(s.minimum) ?? -Infinity;
  let lowerOpen = s.exclusiveMinimum === true;
  const xmin = finite(s.exclusiveMinimum);
  if (xmin !== undefined && xmin >= lower) [lower, lowerOpen] = [xmin, true];
  let upper = finite(s.maximum) ?? Infinity;
  let upperOpen = s.exclusiveMaximum === true;
  const xmax = finite(s.exclusiveMaximum);
  if (xmax !== undefined && xmax <= upper) [upper, upperOpen] = [xmax, true];
  if (lower === -Infinity && upper === Infinity) [lower, upper] = [-1000, 1000];
  else if (lower === -Infinity) lower = Math.max(-Number.MAX_VALUE, upper - 1000);
  else if (upper === Infinity) upper = Math.min(Number.MAX_VALUE, lower + 1000);
  // Between two doubles without overflow, however far apart.
  const between = (a: number, b: number, r: number) => (Number.isFinite(b - a) ? a + r * (b - a) : a * (1 - r) + b * r);
  const step = finite(s.multipleOf);
  const r = random.next();
  if (step !== undefined && step > 0) {
    let lo = Math.ceil(lower / step);
    let hi = Math.floor(upper / step);
    if (lowerOpen && lo * step <= lower) lo += 1;
    if (upperOpen && hi * step >= upper) hi -= 1;
    if (lo > hi) return undefined;
    return Math.round(between(lo, hi, r)) * step;
  }
  if (integer) {
    const lo = lowerOpen ? Math.floor(lower) + 1 : Math.ceil(lower);
    const hi = upperOpen ? Math.ceil(upper) - 1 : Math.floor(upper);
    if (lo > hi) return undefined;
    return Math.min(hi, Math.max(lo, Math.round(between(lo, hi, r))));
  }
  let v = between(lower, upper, r);
  if ((lowerOpen && v <= lower) || (upperOpen && v >= upper)) v = lower / 2 + upper / 2;
  if ((lowerOpen && v <= lower) || (upperOpen && v >= upper)) return undefined;
  return v;
}

/**
 * A string matching the node's pattern (on the linear-time engine) and length bounds, or
 * undefined when a few tries find none. Unbounded repetitions (*, +) are drawn up to `max`,
 * widened while the strings come out too short.
 */
export function patternedString(s: Node, random: Random): string | undefined {
  const pattern = s.pattern as string;
  const min = finite(s.minLength) ?? 0;
  const max = finite(s.maxLength) ?? Infinity;
  const re = new RandExp(pattern);
  (re as unknown as { randInt(a: number, b: number): number }).randInt = (a, b) =>
    a + Math.floor(random.next() * (b - a + 1));
  re.max = Math.max(SLACK, min);
  const matches = linearRegExp(pattern);
  for (let attempt = 0; attempt < 24; attempt++) {
    const v = re.gen();
    if (v.length >= min && v.length <= max && matches.test(v)) return v;
    if (v.length < min) re.max = Math.min(2 * re.max, SCHEMA_LIMITS.minLength);
    else if (v.length > max) re.max = Math.max(1, Math.floor(re.max / 2));
  }
  return undefined;
}

const WORDS = ['lorem', 'ipsum', 'dolor', 'sit', 'amet', 'consectetur', 'adipiscing', 'elit', 'sed', 'do'];

/**
 * A long plain string as words, which take a token for every four or five characters, where
 * random letters take one for every one or two: a minLength near the limit still fits in an answer.
 */
export function wordyString(s: Node, random: Random): string {
  const min = finite(s.minLength) ?? 0;
  const max = Math.min(finite(s.maxLength) ?? Infinity, min + SLACK);
  const length = min + Math.floor(random.next() * (max - min + 1));
  let text = '';
  while (text.length < length) text += `${WORDS[Math.floor(random.next() * WORDS.length)]} `;
  return text.slice(0, length);
}

// Keywords the view adds ("x-local-…"), which faker hands to these generators.
define('local-number', (_value: unknown, schema: Node, ctx: { random: Random }) => numberWithin(schema, ctx.random));
define('local-words', (_value: unknown, schema: Node, ctx: { random: Random }) => wordyString(schema, ctx.random));
define('local-pattern', (_value: unknown, schema: Node, ctx: { random: Random }) =>
  patternedString(schema, ctx.random),
);

const isNode = (v: unknown): v is Node => v !== null && typeof v === 'object' && !Array.isArray(v);
const typesOf = (s: Node): string[] =>
  Array.isArray(s.type) ? (s.type as string[]) : typeof s.type === 'string' ? [s.type] : [];

function adjusted(s: Node): Node {
  const out: Node = { ...s };
  const types = typesOf(s);
  const only = (t: string) => types.length === 1 && types[0] === t;
  const maxLength = finite(s.maxLength);
  if (maxLength !== undefined) out.maxLength = Math.min(maxLength, (finite(s.minLength) ?? 0) + SLACK);
  const maxItems = finite(s.maxItems);
  if (maxItems !== undefined) out.maxItems = Math.min(maxItems, (finite(s.minItems) ?? 0) + SLACK);
  if ((only('number') || only('integer')) && s.enum === undefined && s.const === undefined)
    out['x-local-number'] = true;
  if (only('string') && typeof s.pattern === 'string' && s.format === undefined && s.enum === undefined)
    out['x-local-pattern'] = true;
  else if (
    only('string') &&
    s.pattern === undefined &&
    s.format === undefined &&
    s.enum === undefined &&
    (finite(s.minLength) ?? 0) > WORDY
  )
    out['x-local-words'] = true;
  return out;
}

/**
 * The generation view of `schema`, and its number of properties. Recursion follows the schema's
 * nesting, which admission bounds (SCHEMA_LIMITS.depth); each level's width is a loop.
 */
export function generationView(schema: JsonSchemaObject): { schema: JsonSchemaObject; properties: number } {
  let properties = 0;
  const copy = (v: unknown, isSchema: boolean): unknown => {
    if (Array.isArray(v)) return v.map((x) => copy(x, isSchema));
    if (!isNode(v)) return v;
    if (!isSchema) return v;
    const out = adjusted(v);
    for (const [k, child] of Object.entries(v)) {
      if (k === 'enum' || k === 'const' || k === 'default' || k === 'examples' || k === 'required') continue;
      if (
        ['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'].includes(k) &&
        isNode(child)
      ) {
        if (k === 'properties') properties += Object.keys(child).length;
        out[k] = Object.fromEntries(Object.entries(child).map(([name, sub]) => [name, copy(sub, true)]));
      } else if (isNode(child) || Array.isArray(child)) out[k] = copy(child, true);
    }
    return out;
  };
  return { schema: copy(schema, true) as JsonSchemaObject, properties };
}
