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
  | 'ErrorResponse';

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
  });
  addFormats(ajv);
  // Seconds, as the document says; a millisecond timestamp (13 digits) is a bug, not a date.
  ajv.addFormat('unixtime', { type: 'number', validate: (n: number) => Number.isInteger(n) && n >= 0 && n < 2 ** 32 });
  // OpenAI's documentation and SDK-generator hints: they constrain nothing (x-stainless-const marks
  // an enum of one value, which the enum itself enforces).
  for (const keyword of ['x-oaiMeta', 'x-oaiTypeLabel', 'x-stainless-const', 'example']) ajv.addKeyword({ keyword });
  // The subset's root is not a schema; only its components are, addressed by JSON pointer.
  ajv.addKeyword({ keyword: 'components' });
  const schemas = Object.fromEntries(
    Object.entries(subset.components.schemas).map(([name, s]) => [name, readNullable(s)]),
  );
  ajv.addSchema({ $id: ID, components: { schemas } });
  return new Map(subset.roots.map((name) => [name, ajv.getSchema(`${ID}#/components/schemas/${name}`)!]));
}

let compiled: Map<OpenAiSchema, ValidateFunction> | undefined;

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
