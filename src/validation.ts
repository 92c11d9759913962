import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import addFormatsModule from 'ajv-formats';
import { validationError, type ValidationIssue } from './errors.js';

/** A JSON Schema object; the same objects drive validation and the OpenAPI document. */
export type JsonSchema = Record<string, unknown>;

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

const ajv = new Ajv({ allErrors: true, strict: true, allowUnionTypes: true });
addFormats(ajv);
ajv.addKeyword({ keyword: 'example' });
ajv.addKeyword({ keyword: 'x-unit' });

const compiled = new WeakMap<JsonSchema, ValidateFunction>();

function compile(schema: JsonSchema): ValidateFunction {
  let fn = compiled.get(schema);
  if (!fn) {
    fn = ajv.compile(schema);
    compiled.set(schema, fn);
  }
  return fn;
}

export type Source = 'body' | 'query' | 'path' | 'header';

/** Validates `value` against `schema`; throws the interface's 422 (HTTPValidationError) on failure. */
export function validate<T>(schema: JsonSchema, value: unknown, source: Source): T {
  const fn = compile(schema);
  if (fn(value)) return value as T;
  throw validationError(toIssues(fn.errors ?? [], source));
}

/** True when `value` satisfies `schema`, for non-request data (config files). */
export function check(schema: JsonSchema, value: unknown): { ok: true } | { ok: false; issues: ValidationIssue[] } {
  const fn = compile(schema);
  return fn(value) ? { ok: true } : { ok: false, issues: toIssues(fn.errors ?? [], 'body').map((i) => ({ ...i, loc: i.loc.slice(1) })) };
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

/** Ajv's errors in the FastAPI/pydantic words and types clients of this interface expect. */
function describe(e: ErrorObject): { extra?: string; msg: string; type: string } {
  const p = e.params as Record<string, unknown>;
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
      return { msg: `String should have at most ${p.limit} characters`, type: 'string_too_long' };
    case 'minLength':
      return { msg: `String should have at least ${p.limit} characters`, type: 'string_too_short' };
    case 'maxItems':
      return { msg: `List should have at most ${p.limit} items`, type: 'too_long' };
    case 'minItems':
      return { msg: `List should have at least ${p.limit} items`, type: 'too_short' };
    case 'maxProperties':
      return { msg: `Object should have at most ${p.limit} entries`, type: 'too_long' };
    case 'maximum':
      return { msg: `Input should be less than or equal to ${p.limit}`, type: 'less_than_equal' };
    case 'minimum':
      return { msg: `Input should be greater than or equal to ${p.limit}`, type: 'greater_than_equal' };
    case 'exclusiveMaximum':
      return { msg: `Input should be less than ${p.limit}`, type: 'less_than' };
    case 'exclusiveMinimum':
      return { msg: `Input should be greater than ${p.limit}`, type: 'greater_than' };
    case 'enum':
      return { msg: `Input should be ${(p.allowedValues as unknown[]).map((v) => JSON.stringify(v)).join(' or ')}`, type: 'enum' };
    case 'const':
      return { msg: `Input should be ${JSON.stringify(p.allowedValue)}`, type: 'literal_error' };
    case 'pattern':
      return { msg: `String should match pattern '${p.pattern}'`, type: 'string_pattern_mismatch' };
    case 'additionalProperties':
      return { extra: String(p.additionalProperty), msg: 'Extra inputs are not permitted', type: 'extra_forbidden' };
    case 'format':
      if (p.format === 'email') return { msg: 'value is not a valid email address', type: 'value_error' };
      if (p.format === 'date') return { msg: 'Input should be a valid date in the format YYYY-MM-DD', type: 'date_parsing' };
      if (p.format === 'date-time') return { msg: 'Input should be a valid datetime (ISO 8601)', type: 'datetime_parsing' };
      return { msg: `Input should be a valid ${p.format}`, type: 'value_error' };
    default:
      return { msg: e.message ?? 'Invalid value', type: 'value_error' };
  }
}

/** One issue per failing field, in document order. */
export function toIssues(errors: ErrorObject[], source: Source): ValidationIssue[] {
  const seen = new Set<string>();
  const issues: ValidationIssue[] = [];
  for (const e of errors) {
    const d = describe(e);
    const loc: (string | number)[] = [source, ...pathOf(e.instancePath)];
    if (d.extra !== undefined) loc.push(d.extra);
    const key = JSON.stringify(loc);
    if (seen.has(key)) continue;
    seen.add(key);
    issues.push({ loc, msg: d.msg, type: d.type });
  }
  return issues;
}
