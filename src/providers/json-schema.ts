// The JSON Schemas clients send (tool parameters, response_format.json_schema.schema), read with
// Ajv instances of their own: the service's request validator is strict about our schemas, while
// a client's may use any keyword a JSON Schema dialect has. Draft-07 (what zod-to-json-schema and
// many SDKs emit) and 2020-12 (the default, OpenAI's) are both understood.
import { createHash } from 'node:crypto';
import { Ajv, type ValidateFunction } from 'ajv';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { answerIssue, localRefs, refLoopIssue } from './json-schema-answers.js';
import { limitIssues } from './json-schema-checks.js';
import type { SchemaIssue } from './json-schema-limits.js';
import { forEachSubschema } from './json-schema-walk.js';
import { linearRegExpEngine } from './linear-regexp.js';
import type { JsonSchemaObject } from './types.js';

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv | Ajv2020) => unknown;

const options = {
  strict: false,
  // allErrors keeps the generated code flat: without it Ajv nests one block per property, and a
  // schema of a few thousand properties overflows the stack when compiled or run.
  allErrors: true,
  validateSchema: true,
  addUsedSchema: false,
  // A client's patterns run on the linear-time engine (linear-regexp.ts).
  code: { regExp: linearRegExpEngine },
} as const;

/**
 * A generation of compiled client schemas: Ajv instances and the validators compiled with them,
 * by the hash of the schema's JSON text (a conversation sends the same tools with every turn).
 * Ajv keeps a reference to every schema it compiled, failed ones included, in its instance's
 * code scope; so once a generation has compiled CACHE_BYTES of schema text it is dropped whole
 * and a new one begins, and no run of large, distinct schemas can fill a process.
 */
interface Generation {
  draft7: Ajv;
  draft2020: Ajv2020;
  compiled: Map<string, ValidateFunction>;
  bytes: number;
}
const CACHE_BYTES = 16 * 1024 * 1024;

function newGeneration(): Generation {
  const draft7 = new Ajv(options);
  const draft2020 = new Ajv2020(options);
  addFormats(draft7);
  addFormats(draft2020);
  return { draft7, draft2020, compiled: new Map(), bytes: 0 };
}
let generation = newGeneration();

const ajvFor = (schema: JsonSchemaObject) =>
  typeof schema.$schema === 'string' && /draft-0[4-7]/.test(schema.$schema) ? generation.draft7 : generation.draft2020;

/** Ajv's complaints about a schema against its dialect's meta-schema, at their places in it. */
function metaSchemaIssues(schema: JsonSchemaObject): SchemaIssue[] {
  const ajv = ajvFor(schema);
  let valid: boolean;
  try {
    valid = ajv.validateSchema(schema) as boolean;
  } catch (err) {
    // An unknown $schema: Ajv's words name it.
    return [{ at: ['$schema'], msg: `Not a JSON Schema dialect the service reads: ${(err as Error).message}` }];
  }
  if (valid) return [];
  // At the field itself, naming the place inside it (as the service has always answered).
  return (ajv.errors ?? []).slice(0, 1).map((e) => ({
    at: [],
    msg: `Not a valid JSON Schema: ${e.instancePath || '(the schema)'} ${e.message ?? e.keyword}`,
  }));
}

/** A $ref the service cannot resolve by itself: one outside the schema, or by $id or $anchor. */
function refIssues(schema: JsonSchemaObject, refs: Map<string, unknown>): SchemaIssue[] {
  const issues: SchemaIssue[] = [];
  forEachSubschema(schema, (node, at) => {
    if (typeof node !== 'object' || typeof node.$ref !== 'string' || refs.has(node.$ref) || issues.length > 0) return;
    issues.push({
      at: [...at, '$ref'],
      msg: `The $ref '${node.$ref}' does not name a part of this schema; the service resolves '#' and JSON pointers into the schema such as '#/$defs/name'`,
    });
  });
  return issues;
}

/**
 * Why `schema` is not a JSON Schema the service takes, each problem where it is in the schema;
 * none when it is. In order: the limits (docs/limits.md), a JSON object at the top, the dialect's
 * meta-schema, $refs that resolve without looping, and an answer that exists and fits in an
 * answer. Nothing here compiles the schema, which for a wide one takes seconds: the worker does.
 */
export function jsonSchemaProblems(schema: JsonSchemaObject): SchemaIssue[] {
  const limits = limitIssues(schema);
  if (limits.length > 0) return limits;
  if (schema.type !== undefined && schema.type !== 'object')
    return [
      {
        at: ['type'],
        msg: `The schema must describe a JSON object (type "object"); it has type ${JSON.stringify(schema.type)}`,
      },
    ];
  const meta = metaSchemaIssues(schema);
  if (meta.length > 0) return meta;
  const refs = localRefs(schema);
  const unresolved = refIssues(schema, refs);
  if (unresolved.length > 0) return unresolved;
  const problem = refLoopIssue(schema, refs) ?? answerIssue(schema, refs);
  return problem ? [problem] : [];
}

/** The compiled validator of a client's schema (throws when it is not one; see jsonSchemaProblems). */
export function compileSchema(schema: JsonSchemaObject): ValidateFunction {
  const text = JSON.stringify(schema);
  const key = createHash('sha256').update(text).digest('base64');
  const hit = generation.compiled.get(key);
  if (hit) return hit;
  if (generation.bytes > CACHE_BYTES) generation = newGeneration();
  generation.bytes += Buffer.byteLength(text);
  const ajv = ajvFor(schema);
  try {
    const fn = ajv.compile(schema);
    generation.compiled.set(key, fn);
    return fn;
  } finally {
    ajv.removeSchema(schema);
  }
}

/** What the compiled-schema cache holds: its validators and the bytes of schema text compiled into it. */
export const compiledSchemaCache = (): { entries: number; bytes: number } => ({
  entries: generation.compiled.size,
  bytes: generation.bytes,
});

/** Where `value` departs from `schema`, in a line; undefined when it matches. */
export function schemaMismatch(schema: JsonSchemaObject, value: unknown): string | undefined {
  const fn = compileSchema(schema);
  if (fn(value)) return undefined;
  const e = fn.errors?.[0];
  return e ? `${e.instancePath || '(root)'} ${e.message ?? e.keyword}` : 'does not match';
}
