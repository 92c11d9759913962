import { readFileSync } from 'node:fs';
import { Ajv2020, type ErrorObject, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';

// ajv-formats is CommonJS with a default export.
const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020;

/** The schemas of OpenAI's OpenAPI document that test/fixtures/openai-openapi/schemas.json holds as roots. */
export type OpenAiSchema =
  | 'CreateChatCompletionResponse'
  | 'CreateChatCompletionStreamResponse'
  | 'ListModelsResponse'
  | 'Model'
  | 'ErrorResponse'
  | 'CreateResponse'
  | 'Response'
  | 'ResponseStreamEvent'
  | 'ResponseItemList';

type Schema = Record<string, unknown>;

// Read from the source tree (this module runs from dist/test/support), so a regenerated subset
// needs no rebuild. scripts/extract-openai-schemas.mjs writes it.
const SUBSET = new URL('../../../test/fixtures/openai-openapi/schemas.json', import.meta.url);
const ID = 'https://github.com/openai/openai-openapi/openapi.json';

// Keywords whose value is a map from names to schemas, or a schema, or a list of schemas.
const SCHEMA_MAPS = new Set(['properties', 'patternProperties', '$defs', 'dependentSchemas']);
const SCHEMA_ONE = new Set([
  'items',
  'additionalProperties',
  'unevaluatedProperties',
  'unevaluatedItems',
  'not',
  'if',
  'then',
  'else',
  'contains',
  'propertyNames',
]);
const SCHEMA_LIST = new Set(['allOf', 'anyOf', 'oneOf', 'prefixItems']);

/**
 * OpenAI's document is OpenAPI 3.1 but still marks some schemas `nullable: true`, the 3.0 keyword
 * JSON Schema 2020-12 ignores. OpenAI means it as "this value may also be null": its own chunks
 * carry `finish_reason: null` (an enum without null) and `usage: null` (a `$ref`), as the
 * document's examples show, and its SDKs type those fields `| null`. Ajv's built-in `nullable`
 * would refuse both (null outside the enum; no `type` beside the `$ref`), so each such schema
 * becomes `anyOf: [<schema>, {type: 'null'}]`: exactly what OpenAI means, nothing looser.
 */
function readNullable(schema: unknown): unknown {
  if (schema === null || typeof schema !== 'object' || Array.isArray(schema)) return schema;
  const out: Schema = {};
  for (const [keyword, value] of Object.entries(schema as Schema)) {
    if (SCHEMA_MAPS.has(keyword))
      out[keyword] = Object.fromEntries(Object.entries(value as Schema).map(([name, s]) => [name, readNullable(s)]));
    else if (SCHEMA_ONE.has(keyword)) out[keyword] = readNullable(value);
    else if (SCHEMA_LIST.has(keyword)) out[keyword] = (value as unknown[]).map(readNullable);
    else out[keyword] = value;
  }
  if (!('nullable' in out)) return out;
  const { nullable, ...rest } = out;
  return nullable === true ? { anyOf: [rest, { type: 'null' }] } : rest;
}

/**
 * Two more of the document's OpenAPI habits that JSON Schema 2020-12 reads otherwise:
 * - `$recursiveRef: "#"` (draft 2019-09) means the schema it sits in, here the component
 *   (CompoundFilter's nested filters): it becomes a `$ref` to that component.
 * - A `discriminator` is a hint for picking a `oneOf` branch by its tag. Ajv uses it only when every
 *   branch of a `oneOf` declares the tag among its own properties, as a `const` or `enum` no other
 *   branch shares. Beside an `anyOf`, or where a branch is a wrapper (InputItem, ItemResource, OutputItem) or two branches share
 *   a tag value, the hint is dropped and `oneOf` decides on its own, as the document's validation
 *   semantics already say.
 */
function readOpenApi(schema: unknown, component: string, all: Record<string, unknown>): unknown {
  if (Array.isArray(schema)) return schema.map((s) => readOpenApi(s, component, all));
  if (schema === null || typeof schema !== 'object') return schema;
  const out: Schema = {};
  for (const [keyword, value] of Object.entries(schema as Schema)) {
    if (keyword === '$recursiveRef' && value === '#') out.$ref = `#/components/schemas/${component}`;
    else out[keyword] = readOpenApi(value, component, all);
  }
  const discriminator = out.discriminator as { propertyName: string } | undefined;
  if (discriminator && !tagsAreUnique(out.oneOf as unknown[] | undefined, discriminator.propertyName, all))
    delete out.discriminator;
  return out;
}

function tagsAreUnique(branches: unknown[] | undefined, tag: string, all: Record<string, unknown>): boolean {
  if (!branches) return false;
  const seen = new Set<unknown>();
  for (const branch of branches) {
    let s = branch as Schema;
    const ref = typeof s.$ref === 'string' ? s.$ref : undefined;
    if (ref && Object.keys(s).length === 1) s = all[ref.slice(ref.lastIndexOf('/') + 1)] as Schema;
    const property = (s?.properties as Record<string, Schema> | undefined)?.[tag];
    const values = property?.const !== undefined ? [property.const] : (property?.enum as unknown[] | undefined);
    if (!values?.length) return false;
    for (const v of values) {
      if (typeof v !== 'string' || seen.has(v)) return false;
      seen.add(v);
    }
  }
  return true;
}

let ajvOf: Ajv2020;

function compileAll(): Map<OpenAiSchema, ValidateFunction> {
  const subset = JSON.parse(readFileSync(SUBSET, 'utf8')) as {
    roots: OpenAiSchema[];
    components: { schemas: Record<string, unknown> };
  };
  const ajv = new Ajv2020({
    strict: true,
    allErrors: true,
    // The document's own tagged unions (tool calls, moderation) are checked as OpenAPI means them.
    discriminator: true,
    // OpenAI's Model has `properties` and `required` without `type: object`: valid JSON Schema that
    // only this lint-like rule of Ajv's strict mode objects to. Every other strict rule stays on.
    strictTypes: false,
    // LocalShellToolCallOutput requires `call_id` without listing it among its properties: still a
    // constraint JSON Schema enforces, which this other lint-like rule would refuse to compile.
    strictRequired: false,
  });
  addFormats(ajv);
  // Seconds, as the document says; a millisecond timestamp (13 digits) is a bug, not a date.
  ajv.addFormat('unixtime', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= 0 && n < 2 ** 32 });
  // OpenAI's documentation and SDK-generator hints: they constrain nothing (x-stainless-const marks
  // an enum of one value, which the enum itself enforces).
  for (const keyword of [
    'x-oaiMeta',
    'x-oaiTypeLabel',
    'x-oaiExpandable',
    'x-oaiSupportedSDKs',
    'x-stainless-const',
    'x-stainless-skip',
    'example',
  ])
    ajv.addKeyword({ keyword });
  // The subset's root is not a schema; only its components are, addressed by JSON pointer.
  ajv.addKeyword({ keyword: 'components' });
  const all = subset.components.schemas;
  const schemas = Object.fromEntries(
    Object.entries(all).map(([name, s]) => [name, readOpenApi(readNullable(s), name, all)]),
  );
  ajv.addSchema({ $id: ID, components: { schemas } });
  ajvOf = ajv;
  return new Map(subset.roots.map((name) => [name, ajv.getSchema(`${ID}#/components/schemas/${name}`)!]));
}

let compiled: Map<OpenAiSchema, ValidateFunction> | undefined;
let eventSchemas: Map<string, ValidateFunction> | undefined;

/**
 * Where a Responses stream event departs from OpenAI's schema for its `type` (ResponseStreamEvent
 * is an `anyOf` of one schema per type, whose errors for a bad event would list every other type).
 */
export function responseEventIssues(event: Record<string, unknown>): string[] {
  compiled ??= compileAll();
  eventSchemas ??= eventSchemasByType();
  const validate = eventSchemas.get(String(event.type));
  if (!validate) return [`/type ${JSON.stringify(event.type)} is not an event type of ResponseStreamEvent`];
  if (validate(event)) return [];
  return (validate.errors ?? []).map(
    (e: ErrorObject) => `${e.instancePath || '/'} ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`,
  );
}

function eventSchemasByType(): Map<string, ValidateFunction> {
  const union = compiled!.get('ResponseStreamEvent')!.schema as { anyOf: { $ref: string }[] };
  const byType = new Map<string, ValidateFunction>();
  for (const { $ref } of union.anyOf) {
    const validate = ajvOf.getSchema(`${ID}${$ref}`)!;
    const type = (validate.schema as { properties: { type: { enum?: string[]; const?: string } } }).properties.type;
    for (const t of type.enum ?? [type.const!]) byType.set(t, validate);
  }
  return byType;
}

/**
 * Where `value` departs from OpenAI's published schema `name`, one line per issue (instance path,
 * message); empty when it conforms. Made for `expect(openAiIssues(...)).to.deep.equal([])`, so a
 * failure names every deviation.
 */
export function openAiIssues(name: OpenAiSchema, value: unknown): string[] {
  compiled ??= compileAll();
  const validate = compiled.get(name);
  if (!validate) throw new Error(`${name} is not among the extracted OpenAI schemas`);
  if (validate(value)) return [];
  return (validate.errors ?? []).map(
    (e: ErrorObject) => `${e.instancePath || '/'} ${e.message ?? e.keyword} ${JSON.stringify(e.params)}`,
  );
}
