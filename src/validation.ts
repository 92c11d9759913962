import { Ajv, type ErrorObject, type KeywordDefinition, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { emailAddressProblem } from './email-address.js';
import { validationError, type ValidationIssue } from './errors.js';

/** A JSON Schema object; the same objects drive validation and the OpenAPI document. */
export type JsonSchema = Record<string, unknown>;

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

/**
 * What a string may contain, as the `x-text` keyword of a string schema:
 * - `text` (every string without its own rule): no NUL, which Postgres cannot store, and no lone
 *   surrogate, which is not Unicode and cannot be encoded as UTF-8 without changing it;
 * - `line`: also no other control character (C0, DEL, C1): no CR or LF to land in an email header
 *   or body, nothing a terminal or log would interpret;
 * - `name`: a line with at least one character that is not whitespace.
 */
export type TextRule = 'text' | 'line' | 'name';

// With the u flag a paired surrogate is one code point, so only a lone one is in category Cs.
const LONE_SURROGATE = /\p{Cs}/u;
// Matching control characters is the point of these two.
// eslint-disable-next-line no-control-regex
const NUL = /\u0000/;
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const NOT_BLANK = /\S/u;

function textIssue(rule: TextRule, s: string): { message: string; kind: string } | undefined {
  if (LONE_SURROGATE.test(s))
    return { message: 'String should be valid Unicode (it holds a lone surrogate)', kind: 'lone_surrogate' };
  const bad = (rule === 'text' ? NUL : CONTROL).exec(s);
  if (bad) {
    const code = `U+${bad[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`;
    return {
      message: `String should not contain control characters (${code} at position ${bad.index})`,
      kind: 'control_character',
    };
  }
  if (rule === 'name' && !NOT_BLANK.test(s))
    return { message: 'String should have at least one character that is not whitespace', kind: 'blank' };
  return undefined;
}

/**
 * Teaches an Ajv instance the keywords of our schemas beyond JSON Schema's: the service's own
 * instance, and the tests' JSON Schema 2020-12 one that compiles every schema of /openapi.json.
 */
export function addSchemaKeywords(target: { addKeyword(def: KeywordDefinition): unknown }): void {
  // Shown in the OpenAPI document; they constrain nothing.
  target.addKeyword({ keyword: 'example' });
  target.addKeyword({ keyword: 'x-unit' });
  target.addKeyword({
    keyword: 'x-text',
    type: 'string',
    schemaType: 'string',
    errors: true,
    validate: function checkText(this: unknown, rule: TextRule, data: string) {
      const issue = textIssue(rule, data);
      (checkText as { errors?: Partial<ErrorObject>[] }).errors = issue
        ? [{ keyword: 'x-text', message: issue.message, params: { rule, kind: issue.kind } }]
        : [];
      return issue === undefined;
    },
  });
}

// discriminator: OpenAPI's tagged unions (content parts, response_format), each error at the tag.
const ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true, discriminator: true });
addFormats(ajv);
// An address the service can send to, internationalised domains included (ajv-formats' own check
// takes ASCII only); a refusal says why (describe below).
ajv.addFormat('email', { type: 'string', validate: (s: string) => emailAddressProblem(s) === undefined });
addSchemaKeywords(ajv);

/** A copy of the schema in which every string without a rule of its own gets `x-text: text`. */
function withTextRules(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(withTextRules);
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(schema)) {
    // Literal values (enum, const, examples, defaults) are data, not schemas.
    out[k] = k === 'enum' || k === 'const' || k === 'example' || k === 'default' ? v : withTextRules(v);
  }
  const type = out.type;
  const isString = type === 'string' || (Array.isArray(type) && type.includes('string'));
  if (isString && out['x-text'] === undefined) out['x-text'] = 'text';
  return out;
}

const compiled = new WeakMap<JsonSchema, ValidateFunction>();

function compile(schema: JsonSchema): ValidateFunction {
  let fn = compiled.get(schema);
  if (!fn) {
    fn = ajv.compile(withTextRules(schema) as JsonSchema);
    compiled.set(schema, fn);
  }
  return fn;
}

export type Source = 'body' | 'query' | 'path' | 'header';

/** Validates `value` against `schema`; throws the interface's 422 (HTTPValidationError) on failure. */
export function validate<T>(schema: JsonSchema, value: unknown, source: Source): T {
  const fn = compile(schema);
  if (fn(value)) return value as T;
  throw validationError(toIssues(fn.errors ?? [], source, value));
}

/** True when `value` satisfies `schema`, for non-request data (config files). */
export function check(schema: JsonSchema, value: unknown): { ok: true } | { ok: false; issues: ValidationIssue[] } {
  const fn = compile(schema);
  return fn(value)
    ? { ok: true }
    : { ok: false, issues: toIssues(fn.errors ?? [], 'body', value).map((i) => ({ ...i, loc: i.loc.slice(1) })) };
}

function pathOf(instancePath: string): (string | number)[] {
  if (instancePath === '') return [];
  return instancePath
    .slice(1)
    .split('/')
    .map((seg) => seg.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((seg) => (/^\d+$/.test(seg) ? Number(seg) : seg));
}

const TYPE_NAMES: Record<string, [string, string]> = {
  string: ['Input should be a valid string', 'string_type'],
  number: ['Input should be a valid number', 'float_type'],
  integer: ['Input should be a valid integer', 'int_type'],
  boolean: ['Input should be a valid boolean', 'bool_type'],
  array: ['Input should be a valid list', 'list_type'],
  object: ['Input should be a valid dictionary', 'dict_type'],
};

/** The value an error is about, found in the validated value by the error's path. */
function valueAt(root: unknown, instancePath: string): unknown {
  let at = root;
  for (const seg of pathOf(instancePath)) at = (at as Record<string | number, unknown> | undefined)?.[seg];
  return at;
}

/** Ajv's errors in the FastAPI/pydantic words and types clients of this interface expect. */
function describe(e: ErrorObject, root: unknown): { extra?: string; msg: string; type: string } {
  const p = e.params as Record<string, unknown>;
  const limit = String(p.limit);
  switch (e.keyword) {
    case 'required':
      return { extra: String(p.missingProperty), msg: 'Field required', type: 'missing' };
    case 'type': {
      const types = Array.isArray(p.type) ? (p.type as string[]) : String(p.type).split(',');
      const t = types.find((x) => x !== 'null') ?? 'string';
      const [msg, type] = TYPE_NAMES[t] ?? [`Input should be of type ${t}`, 'type_error'];
      return { msg, type };
    }
    case 'maxLength':
      return { msg: `String should have at most ${limit} characters`, type: 'string_too_long' };
    case 'minLength':
      return { msg: `String should have at least ${limit} characters`, type: 'string_too_short' };
    case 'maxItems':
      return { msg: `List should have at most ${limit} items`, type: 'too_long' };
    case 'minItems':
      return { msg: `List should have at least ${limit} items`, type: 'too_short' };
    case 'maxProperties':
      return { msg: `Object should have at most ${limit} entries`, type: 'too_long' };
    case 'maximum':
      return { msg: `Input should be less than or equal to ${limit}`, type: 'less_than_equal' };
    case 'minimum':
      return { msg: `Input should be greater than or equal to ${limit}`, type: 'greater_than_equal' };
    case 'exclusiveMaximum':
      return { msg: `Input should be less than ${limit}`, type: 'less_than' };
    case 'exclusiveMinimum':
      return { msg: `Input should be greater than ${limit}`, type: 'greater_than' };
    case 'enum':
      return {
        msg: `Input should be ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(' or ')}`,
        type: 'enum',
      };
    case 'const':
      return { msg: `Input should be ${JSON.stringify(p.allowedValue)}`, type: 'literal_error' };
    case 'pattern':
      return { msg: `String should match pattern '${String(p.pattern)}'`, type: 'string_pattern_mismatch' };
    case 'x-text':
      return {
        msg: e.message ?? 'Invalid characters',
        type: p.kind === 'lone_surrogate' ? 'string_unicode' : p.kind === 'blank' ? 'string_too_short' : 'value_error',
      };
    case 'discriminator':
      return p.error === 'mapping'
        ? {
            extra: String(p.tag),
            msg: `Input tag ${JSON.stringify(p.tagValue)} found using '${String(p.tag)}' does not match any of the expected tags`,
            type: 'union_tag_invalid',
          }
        : {
            extra: String(p.tag),
            msg: `Unable to extract tag using discriminator '${String(p.tag)}'`,
            type: 'union_tag_not_found',
          };
    case 'additionalProperties':
      return { extra: String(p.additionalProperty), msg: 'Extra inputs are not permitted', type: 'extra_forbidden' };
    case 'format':
      if (p.format === 'email') {
        // pydantic's words, and its way of adding the reason.
        const problem = emailAddressProblem(String(valueAt(root, e.instancePath)));
        return { msg: `value is not a valid email address${problem ? `: ${problem}` : ''}`, type: 'value_error' };
      }
      if (p.format === 'date')
        return { msg: 'Input should be a valid date in the format YYYY-MM-DD', type: 'date_parsing' };
      if (p.format === 'date-time')
        return { msg: 'Input should be a valid datetime (ISO 8601)', type: 'datetime_parsing' };
      return { msg: `Input should be a valid ${String(p.format)}`, type: 'value_error' };
    default:
      return { msg: e.message ?? 'Invalid value', type: 'value_error' };
  }
}

/** One issue per failing field, in document order. */
export function toIssues(errors: ErrorObject[], source: Source, root: unknown): ValidationIssue[] {
  const seen = new Set<string>();
  const issues: ValidationIssue[] = [];
  for (const e of errors) {
    const d = describe(e, root);
    const loc: (string | number)[] = [source, ...pathOf(e.instancePath)];
    if (d.extra !== undefined) loc.push(d.extra);
    const key = JSON.stringify(loc);
    if (seen.has(key)) continue;
    seen.add(key);
    issues.push({ loc, msg: d.msg, type: d.type });
  }
  return issues;
}
