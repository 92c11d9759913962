// The JSON Schemas clients send (tool parameters, response_format.json_schema.schema), read with
// Ajv instances of their own: the service's request validator is strict about our schemas, while
// a client's may use any keyword a JSON Schema dialect has. Draft-07 (what zod-to-json-schema and
// many SDKs emit) and 2020-12 (the default, OpenAI's) are both understood.
import { Ajv, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import type { JsonSchemaObject } from './types.js';

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv | Ajv2020) => unknown;

const options = { strict: false, allErrors: false, validateSchema: true, addUsedSchema: false } as const;
const draft7 = new Ajv(options);
const draft2020 = new Ajv2020(options);
addFormats(draft7);
addFormats(draft2020);

/** Deeper than any real tool schema; bounds the work a client's schema can cause. */
const MAX_DEPTH = 32;

function depthOf(value: unknown, depth = 0): number {
  if (depth > MAX_DEPTH || value === null || typeof value !== 'object') return depth;
  let deepest = depth;
  for (const v of Object.values(value)) deepest = Math.max(deepest, depthOf(v, depth + 1));
  return deepest;
}

const ajvFor = (schema: JsonSchemaObject) =>
  typeof schema.$schema === 'string' && /draft-0[4-7]/.test(schema.$schema) ? draft7 : draft2020;

/**
 * Why `schema` is not a usable JSON Schema object, or undefined when it is: checked against its
 * dialect's meta-schema and compiled (unresolvable references, bad patterns), without running it.
 */
export function jsonSchemaProblem(schema: JsonSchemaObject): string | undefined {
  if (depthOf(schema) > MAX_DEPTH) return `The schema is nested deeper than ${MAX_DEPTH} levels`;
  if (schema.type !== undefined && schema.type !== 'object')
    return `The schema must describe a JSON object (type "object"); it has type ${JSON.stringify(schema.type)}`;
  try {
    compileSchema(schema);
    return undefined;
  } catch (err) {
    return `Not a valid JSON Schema: ${err instanceof Error ? err.message : String(err)}`;
  }
}

// Compiled schemas by their JSON text: a conversation sends the same tools with every turn.
const CACHE_SIZE = 256;
const cache = new Map<string, ValidateFunction>();

/** The compiled validator of a client's schema (throws when it is not one; see jsonSchemaProblem). */
export function compileSchema(schema: JsonSchemaObject): ValidateFunction {
  const key = JSON.stringify(schema);
  let fn = cache.get(key);
  if (fn) {
    cache.delete(key);
    cache.set(key, fn);
    return fn;
  }
  fn = ajvFor(schema).compile(schema);
  cache.set(key, fn);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value!);
  return fn;
}

/** Where `value` departs from `schema`, in a line; undefined when it matches. */
export function schemaMismatch(schema: JsonSchemaObject, value: unknown): string | undefined {
  const fn = compileSchema(schema);
  if (fn(value)) return undefined;
  const e = fn.errors?.[0];
  return e ? `${e.instancePath || '(root)'} ${e.message ?? e.keyword}` : 'does not match';
}
