import fc from 'fast-check';
import { SCHEMA_LIMITS } from '../../src/providers/json-schema-limits.js';

// fast-check arbitraries of the JSON Schemas clients send (tool parameters, a json_schema): ones
// within the limits of docs/limits.md that some answer satisfies, and ones beyond exactly one
// limit (or with one contradiction where a value is required), with where the 422 must point.

export type Schema = Record<string, unknown>;
export type Loc = (string | number)[];

/** Patterns the linear-time engine runs. */
const LINEAR_PATTERNS = ['^[a-z]+$', '^(a|aa)+$', '^[A-Z][a-z]*( [A-Z][a-z]*)*$', '^\\d+(\\.\\d+)?$', '^[^@]+@[^@]+$'];
/** Patterns it cannot run: lookaround, backreferences, long counted repetitions. */
const BACKTRACKING_PATTERNS = [
  '^(?!(a|a)*b)a{40}$',
  '(a)\\1',
  '(?<=x)y',
  '^[a-z]{1,64}$',
  '^(?=.*\\d).+$',
  '(?<w>a)\\k<w>',
];

const name = fc.stringMatching(/^[a-z][a-z0-9_]{0,11}$/);

const leaf: fc.Arbitrary<Schema> = fc.oneof(
  fc
    .record({
      min: fc.nat(20),
      extra: fc.nat(20),
      pattern: fc.option(fc.constantFrom(...LINEAR_PATTERNS), { nil: undefined }),
    })
    .map(({ min, extra, pattern }) => ({
      type: 'string',
      ...(pattern === undefined ? { minLength: min, maxLength: min + extra } : { pattern }),
    })),
  fc
    .record({ min: fc.integer({ min: -1e9, max: 1e9 }), span: fc.nat(1e6) })
    .map(({ min, span }) => ({ type: 'integer', minimum: min, maximum: min + span })),
  fc
    .record({
      min: fc.double({ noNaN: true, noDefaultInfinity: true, min: -1e300, max: 1e300 }),
      span: fc.double({ noNaN: true, min: 0, max: 1e300 }),
    })
    .map(({ min, span }) => ({ type: 'number', minimum: min, maximum: Math.min(Number.MAX_VALUE, min + span) })),
  fc.constant({ type: 'boolean' }),
  fc.constant({ type: 'null' }),
  fc.uniqueArray(fc.string({ maxLength: 10 }), { minLength: 1, maxLength: 20 }).map((values) => ({ enum: values })),
);

/** An object schema within every limit, which some answer satisfies. */
export const schemaWithinLimits: fc.Arbitrary<Schema> = fc.letrec<{ node: Schema; object: Schema; array: Schema }>(
  (tie) => ({
    node: fc.oneof({ depthSize: 'small', withCrossShrink: true }, leaf, tie('object'), tie('array')),
    object: fc
      .dictionary(name, tie('node'), { maxKeys: 6 })
      .chain((properties) =>
        fc
          .subarray(Object.keys(properties))
          .map((required) => ({ type: 'object', properties, required, additionalProperties: false })),
      ),
    array: fc
      .record({ items: tie('node'), min: fc.nat(3), extra: fc.nat(5) })
      .map(({ items, min, extra }) => ({ type: 'array', items, minItems: min, maxItems: min + extra })),
  }),
).object;

const over = (limit: number) => fc.integer({ min: limit + 1, max: Math.max(limit + 1, 1e9) });

/** A subschema beyond one limit, or contradicting itself, and where in it the 422 points. */
interface Violation {
  schema: Schema;
  at: Loc;
}
const violation: fc.Arbitrary<Violation> = fc.oneof<fc.Arbitrary<Violation>[]>(
  over(SCHEMA_LIMITS.minLength).map((n) => ({ schema: { type: 'string', minLength: n }, at: ['minLength'] })),
  over(SCHEMA_LIMITS.minItems).map((n) => ({ schema: { type: 'array', minItems: n }, at: ['minItems'] })),
  over(SCHEMA_LIMITS.minProperties).map((n) => ({
    schema: { type: 'object', minProperties: n },
    at: ['minProperties'],
  })),
  fc.integer({ min: SCHEMA_LIMITS.enumValues + 1, max: SCHEMA_LIMITS.enumValues + 50 }).map((n) => ({
    schema: { enum: Array.from({ length: n }, (_, i) => i) },
    at: ['enum'],
  })),
  fc.integer({ min: SCHEMA_LIMITS.propertiesPerObject + 1, max: SCHEMA_LIMITS.propertiesPerObject + 20 }).map((n) => ({
    schema: {
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: n }, (_, i) => [`p${i}`, { type: 'string' }])),
    },
    at: ['properties'],
  })),
  fc
    .constantFrom(...BACKTRACKING_PATTERNS)
    .map((pattern) => ({ schema: { type: 'string', pattern }, at: ['pattern'] })),
  fc
    .record({ max: fc.integer({ min: -1e6, max: 1e6 }), gap: fc.integer({ min: 1, max: 1e6 }) })
    .map(({ max, gap }) => ({ schema: { type: 'integer', minimum: max + gap, maximum: max }, at: [] })),
  fc
    .record({ max: fc.nat(100), gap: fc.integer({ min: 1, max: 100 }) })
    .map(({ max, gap }) => ({ schema: { type: 'string', minLength: max + gap, maxLength: max }, at: [] })),
  fc.constant<Violation>({ schema: { not: {} }, at: ['not'] }),
  fc.constant<Violation>({ schema: { enum: [] }, at: ['enum'] }),
);

/**
 * A schema within the limits but for one violation, placed behind a chain of required
 * properties, and the 422's place in the schema.
 */
export const schemaBeyondOneLimit: fc.Arbitrary<{ schema: Schema; at: Loc }> = fc
  .record({ base: schemaWithinLimits, path: fc.array(name, { minLength: 1, maxLength: 4 }), bad: violation })
  .map(({ base, path, bad }) => {
    // Names of the chain ("x_…") never meet the base's (generated without the prefix "x_").
    const names = path.map((n, i) => `x_${i}_${n}`);
    let inner: Schema = bad.schema;
    for (const n of names.slice(1).reverse())
      inner = { type: 'object', properties: { [n]: inner }, required: [n], additionalProperties: false };
    const first = names[0]!;
    const schema = {
      ...base,
      properties: { ...(base.properties as Schema), [first]: inner },
      required: [...(base.required as string[]), first],
    };
    return { schema, at: [...names.flatMap((n) => ['properties', n]), ...bad.at] };
  });
