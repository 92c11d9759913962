import fc from 'fast-check';
import type { JsonSchema } from '../../src/validation.js';

// fast-check arbitraries derived from the same JSON Schemas the web tier validates with: values
// the schema accepts, and values it refuses together with where the refusal must point (`loc`).
// They cover the keywords our request schemas use; anything else throws, so a new keyword in a
// schema cannot silently go untested.

type Schema = JsonSchema & Record<string, any>;
export type Loc = (string | number)[];
export interface Invalid {
  value: unknown;
  /** Where the 422 must point, without the source (body, query). */
  loc: Loc;
}

export interface GenOptions {
  /** Query strings carry only strings (and repeated keys, which arrive as arrays). */
  query?: boolean;
  /** Replaces the generator of the valid value at a path ('messages.*.role', 'model'). */
  overrides?: Record<string, fc.Arbitrary<unknown>>;
  /** Longest string generated for a valid value, whatever the schema allows (speed). */
  maxStringLength?: number;
}

const KNOWN = new Set([
  'type',
  'properties',
  'required',
  'items',
  'maxItems',
  'minItems',
  'maxLength',
  'minLength',
  'minimum',
  'maximum',
  'enum',
  'const',
  'format',
  'x-text',
  'additionalProperties',
  'default',
  'description',
  'example',
  'pattern',
  'propertyNames',
  'maxProperties',
  'oneOf',
  'discriminator',
]);

function typesOf(schema: Schema): string[] {
  for (const k of Object.keys(schema))
    if (!KNOWN.has(k)) throw new Error(`schema-arbitraries does not know the keyword ${k}`);
  if (schema.enum || schema.const !== undefined) return ['string'];
  const t = schema.type;
  if (t === undefined) throw new Error(`schema without a type: ${JSON.stringify(schema)}`);
  return Array.isArray(t) ? t : [t];
}

const pathKey = (path: Loc) => path.map((p) => (typeof p === 'number' ? '*' : p)).join('.');

// Characters a client might send: mostly printable ASCII, then anything in Unicode (astral
// planes included), then the ones that matter to the rules (whitespace, controls, NUL).
const anyChar = fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 1 }) },
  { weight: 3, arbitrary: fc.string({ unit: 'binary', minLength: 1, maxLength: 1 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(' ', '\n', '\t', '\r', '\u00a0', '\u3000', 'é', '李', '😀', '\u200b', '\ufeff'),
  },
);

const LONE_SURROGATE = /\p{Cs}/u;
// eslint-disable-next-line no-control-regex -- the characters the x-text rules refuse
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const allowedChar = (rule: string) => (c: string) =>
  !LONE_SURROGATE.test(c) && c !== '\u0000' && (rule === 'text' || !CONTROL.test(c));

function validString(schema: Schema, opts: GenOptions): fc.Arbitrary<string> {
  if (schema.enum) return fc.constantFrom(...(schema.enum as string[]));
  if (schema.const !== undefined) return fc.constant(schema.const as string);
  if (schema.pattern) return fc.stringMatching(new RegExp(schema.pattern as string));
  if (schema.format === 'email') return fc.emailAddress().filter((e) => e.length <= (schema.maxLength ?? 254));
  if (schema.format === 'date')
    return fc
      .date({ min: new Date('2000-01-01T00:00:00Z'), max: new Date('2099-12-31T00:00:00Z'), noInvalidDate: true })
      .map((d) => d.toISOString().slice(0, 10));
  if (schema.format !== undefined) throw new Error(`schema-arbitraries cannot generate format ${schema.format}`);
  const rule: string = schema['x-text'] ?? 'text';
  const min = schema.minLength ?? 0;
  const max = Math.max(min, Math.min(schema.maxLength ?? 1000, opts.maxStringLength ?? 1000));
  const s = fc.array(anyChar.filter(allowedChar(rule)), { minLength: min, maxLength: max }).map((cs) => cs.join(''));
  // A name needs a character that is not whitespace.
  return rule === 'name' ? s.map((v) => (/\S/u.test(v) ? v : `${v.slice(0, Math.max(0, max - 1))}A`)) : s;
}

/** A value the schema accepts. */
export function validOf(schema: Schema, opts: GenOptions = {}, path: Loc = []): fc.Arbitrary<unknown> {
  const override = opts.overrides?.[pathKey(path)];
  if (override) return override;
  const types = typesOf(schema).filter((t) => t !== 'null');
  const nullable = typesOf(schema).includes('null');
  const arbs = types.map((t) => validOfType(t, schema, opts, path));
  const value = arbs.length === 1 ? arbs[0]! : fc.oneof(...arbs);
  return nullable ? fc.oneof({ weight: 1, arbitrary: fc.constant(null) }, { weight: 3, arbitrary: value }) : value;
}

function validOfType(type: string, schema: Schema, opts: GenOptions, path: Loc): fc.Arbitrary<unknown> {
  switch (type) {
    case 'string':
      return validString(schema, opts);
    case 'integer':
      return fc.integer({ min: schema.minimum ?? -1_000_000, max: schema.maximum ?? 1_000_000 });
    case 'number':
      return fc
        .double({ min: schema.minimum ?? -1e6, max: schema.maximum ?? 1e6, noNaN: true, noDefaultInfinity: true })
        .map((n) => (Object.is(n, -0) ? 0 : n));
    case 'boolean':
      return fc.boolean();
    case 'array':
      // An array whose items the schema leaves open: an empty one is valid whatever they may be.
      if (schema.items === undefined) return fc.constant([]);
      return fc.array(validOf(schema.items as Schema, opts, [...path, 0]), {
        minLength: schema.minItems ?? 0,
        maxLength: Math.min(schema.maxItems ?? 10, 10),
      });
    case 'object': {
      // A tagged union (OpenAPI's discriminator): a value of one of its branches.
      if (schema.oneOf) return fc.oneof(...(schema.oneOf as Schema[]).map((b) => validOf(b, opts, path)));
      if (schema.additionalProperties && typeof schema.additionalProperties === 'object' && !schema.properties) {
        return fc.dictionary(
          fc.string({ maxLength: 10 }),
          validOf(schema.additionalProperties as Schema, opts, [...path, '*']),
          { maxKeys: Math.min(5, schema.maxProperties ?? 5) },
        );
      }
      const props = (schema.properties ?? {}) as Record<string, Schema>;
      const required = new Set((schema.required ?? []) as string[]);
      const model: Record<string, fc.Arbitrary<unknown>> = {};
      for (const [name, s] of Object.entries(props)) model[name] = validOf(s, opts, [...path, name]);
      return fc.record(model, { requiredKeys: Object.keys(props).filter((k) => required.has(k)) });
    }
    default:
      throw new Error(`schema-arbitraries cannot generate type ${type}`);
  }
}

/** A value the schema refuses, and where the refusal must point. */
export function invalidOf(schema: Schema, opts: GenOptions = {}, path: Loc = []): fc.Arbitrary<Invalid> {
  const options = invalidOptions(schema, opts, path);
  if (options.length === 0) throw new Error(`no invalid value for ${pathKey(path)}`);
  return fc.oneof(...options);
}

const at =
  (path: Loc) =>
  (value: unknown): Invalid => ({ value, loc: path });

function invalidOptions(schema: Schema, opts: GenOptions, path: Loc): fc.Arbitrary<Invalid>[] {
  const types = typesOf(schema);
  const out: fc.Arbitrary<Invalid>[] = [];
  // A value of a type the schema does not allow (a query string can only repeat a key).
  if (opts.query) {
    // A key given twice arrives as an array: wrong for a parameter that is not one. (Inside an
    // array parameter there is nothing to repeat: a query string has no nesting.)
    if (path.length === 1 && !types.includes('array')) out.push(fc.constant(at(path)(['a', 'b'])));
  } else {
    const wrong = [
      ['string', 'not this'],
      ['integer', 7],
      ['number', 7.5],
      ['boolean', true],
      ['array', [1]],
      ['object', { x: 1 }],
    ].filter(
      ([t, v]) =>
        !types.includes(t as string) &&
        !(t === 'integer' && types.includes('number')) &&
        !(t === 'number' && types.includes('integer') && Number.isInteger(v)),
    );
    if (types.includes('integer')) wrong.push(['number', 1.5]);
    out.push(fc.constantFrom(...wrong.map(([, v]) => v)).map(at(path)));
  }
  if (types.includes('string')) out.push(...invalidStrings(schema, path, opts));
  if (types.includes('integer') || types.includes('number')) {
    if (schema.minimum !== undefined) out.push(fc.constant(at(path)(schema.minimum - 1)));
    if (schema.maximum !== undefined) out.push(fc.constant(at(path)(schema.maximum + 1)));
  }
  if (types.includes('array') && schema.items !== undefined) {
    const item = schema.items as Schema;
    if (schema.maxItems !== undefined)
      out.push(
        fc
          .array(validOf(item, { ...opts, maxStringLength: 5 }, [...path, 0]), {
            minLength: schema.maxItems + 1,
            maxLength: schema.maxItems + 1,
          })
          .map(at(path)),
      );
    if (schema.minItems) out.push(fc.constant(at(path)([])));
    out.push(
      fc
        .tuple(
          fc.array(validOf(item, opts, [...path, 0]), { minLength: schema.minItems ?? 0, maxLength: 3 }),
          fc.nat(),
          invalidOf(item, opts, [...path, 0]),
        )
        .map(([items, n, bad]) => {
          const i = n % (items.length + 1);
          const copy = [...items];
          copy.splice(i, 0, bad.value);
          return { value: copy, loc: [...path, i, ...bad.loc.slice(path.length + 1)] };
        }),
    );
  }
  if (types.includes('object') && schema.oneOf) {
    // Each branch's own invalid values (a wrong or missing tag is refused at the tag).
    for (const branch of schema.oneOf as Schema[]) out.push(...invalidOptions(branch, opts, path));
  }
  if (types.includes('object') && schema.additionalProperties && typeof schema.additionalProperties === 'object') {
    out.push(
      invalidOf(schema.additionalProperties as Schema, opts, [...path, 'k']).map((bad) => ({
        value: { k: bad.value },
        loc: bad.loc,
      })),
    );
  }
  if (types.includes('object') && schema.maxProperties !== undefined) {
    const n = (schema.maxProperties as number) + 1;
    const value = (schema.additionalProperties ?? { type: 'string', maxLength: 5 }) as Schema;
    out.push(
      fc
        .array(validOf(value, { ...opts, maxStringLength: 5 }, [...path, '*']), { minLength: n, maxLength: n })
        .map((values) => at(path)(Object.fromEntries(values.map((v, i) => [`k${i}`, v])))),
    );
  }
  if (types.includes('object') && schema.properties) {
    const props = schema.properties as Record<string, Schema>;
    // An object to change one property of (the schema may allow other types beside objects).
    const base = (opts.overrides?.[pathKey(path)] ?? validOfType('object', schema, opts, path)) as fc.Arbitrary<
      Record<string, unknown>
    >;
    for (const name of (schema.required ?? []) as string[]) {
      out.push(
        base.map((v) => {
          const { [name]: _gone, ...rest } = v;
          return { value: rest, loc: [...path, name] };
        }),
      );
    }
    for (const [name, s] of Object.entries(props)) {
      if (opts.overrides?.[pathKey([...path, name])] && !s.type) continue;
      out.push(
        fc
          .tuple(base, invalidOf(s, opts, [...path, name]))
          .map(([v, bad]) => ({ value: { ...v, [name]: bad.value }, loc: bad.loc })),
      );
    }
  }
  return out;
}

function invalidStrings(schema: Schema, path: Loc, opts: GenOptions): fc.Arbitrary<Invalid>[] {
  const out: fc.Arbitrary<Invalid>[] = [];
  if (schema.enum) return [fc.constant(at(path)('not-one-of-them'))];
  if (schema.const !== undefined) return [fc.constant(at(path)(`${schema.const}x`))];
  if (schema.maxLength !== undefined) out.push(fc.constant(at(path)('x'.repeat(schema.maxLength + 1))));
  if (schema.minLength) out.push(fc.constant(at(path)('')));
  if (schema.pattern) {
    const re = new RegExp(schema.pattern as string);
    out.push(
      fc
        .oneof(fc.constantFrom('', ' ', 'a b', 'x'.repeat(65), 'é'), fc.string({ maxLength: 8 }))
        .filter((v) => !re.test(v))
        .map(at(path)),
    );
  }
  if (schema.format === 'email') out.push(fc.constantFrom('not-an-email', 'a@', '@b.c', 'a b@c.d').map(at(path)));
  if (schema.format === 'date')
    out.push(fc.constantFrom('2026-13-01', '2026-02-30', '26-01-01', 'yesterday').map(at(path)));
  const rule: string = schema['x-text'] ?? 'text';
  // A URL carries UTF-8, in which a lone surrogate cannot be written (invalid percent-encoding has a test of its own).
  const surrogates = opts.query ? [] : ['\ud800', '\udfff'];
  const forbidden = [
    '\u0000',
    ...surrogates,
    ...(rule === 'text' ? [] : ['\n', '\r', '\t', '\u001b', '\u007f', '\u0085']),
  ];
  out.push(
    fc.tuple(fc.constantFrom(...forbidden), fc.string({ maxLength: 5 })).map(([c, s]) => at(path)(`${s}${c}${s}`)),
  );
  if (rule === 'name') out.push(fc.constantFrom('', ' ', '\u00a0\u3000', '   ').map(at(path)));
  return out;
}
