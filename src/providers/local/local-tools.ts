// How the built-in model calls tools and answers in JSON, deterministically: the tool it calls and
// the JSON it writes follow from the request's seed (see planChoice), and the JSON is generated from
// the client's JSON Schema by json-schema-faker (seeded), then checked against that schema.
import { generateSync } from 'json-schema-faker';
import { AppError } from '../../errors.js';
import { schemaMismatch } from '../json-schema.js';
import { SCHEMA_LIMITS } from '../json-schema-limits.js';
import { generationView } from './generation-view.js';
import { textOf } from '../messages.js';
import type { CompletionParams, JsonSchemaObject, ToolDefinition } from '../types.js';

export interface PlannedCall {
  id: string;
  name: string;
  arguments: string;
}

const ANY_OBJECT: JsonSchemaObject = { type: 'object' };

/**
 * The tool this answer calls, if it calls one: the named tool_choice, or, when the last message is
 * the user's (or tool_choice is "required"), the tool whose name and description share the most
 * words with that message (ties broken by `rand`). After a tool's result, with "auto", it answers.
 */
export function toolToCall(params: CompletionParams, rand: () => number): ToolDefinition | undefined {
  const tools = params.tools ?? [];
  const choice = params.tool_choice ?? 'auto';
  if (tools.length === 0 || choice === 'none') return undefined;
  if (typeof choice === 'object') return tools.find((t) => t.function.name === choice.function.name);
  const last = params.messages[params.messages.length - 1];
  if (choice === 'auto' && last?.role !== 'user') return undefined;
  const words = new Set(
    textOf(last?.content ?? null)
      .toLowerCase()
      .match(/[a-z0-9]+/g) ?? [],
  );
  const score = (t: ToolDefinition) =>
    (
      `${t.function.name.replace(/[_-]/g, ' ')} ${t.function.description ?? ''}`.toLowerCase().match(/[a-z0-9]+/g) ?? []
    ).filter((w) => w.length > 2 && words.has(w)).length;
  const best = Math.max(...tools.map(score));
  const candidates = tools.filter((t) => score(t) === best);
  return candidates[Math.floor(rand() * candidates.length)];
}

/** A seed for json-schema-faker from the answer's own generator. */
const seedFrom = (rand: () => number) => Math.floor(rand() * 2 ** 31);

/** Why the local model gave no JSON for a schema: it found no value matching it within its budget. */
export class SchemaGenerationError extends Error {
  constructor(readonly mismatch: string) {
    super(`the local model could not generate JSON matching the schema (${mismatch})`);
    this.name = 'SchemaGenerationError';
  }
}

/**
 * JSON text that satisfies `schema`, at most SCHEMA_LIMITS.answerChars long: json-schema-faker's
 * value (numbers and patterned strings by generators of our own, see generation-view.ts), checked
 * with Ajv. A schema it cannot satisfy gets a few more seeds, the last ones writing only what is
 * required, then SchemaGenerationError: the request ends with a 400 naming the schema.
 */
export function jsonFor(schema: JsonSchemaObject, rand: () => number): string {
  const view = generationView(schema);
  // A wide object gets a few of its optional properties, not half of thousands.
  const optionals = Math.min(0.5, 50 / Math.max(1, view.properties));
  let mismatch = 'no value was found';
  for (let attempt = 0; attempt < 5; attempt++) {
    const value = generateSync(view.schema, {
      seed: seedFrom(rand),
      maxDepth: 4,
      maxDefaultItems: 3,
      optionalsProbability: attempt < 3 ? optionals : 0,
    });
    const text = JSON.stringify(value);
    if (text === undefined) continue;
    if (text.length > SCHEMA_LIMITS.answerChars) {
      mismatch = `every value found was longer than ${SCHEMA_LIMITS.answerChars} characters`;
      continue;
    }
    let problem: string | undefined;
    try {
      problem = schemaMismatch(schema, value);
    } catch {
      // Admission reads the schema without compiling it (compiling a wide one takes seconds).
      throw new SchemaGenerationError('the schema could not be compiled');
    }
    if (problem === undefined) return text;
    mismatch = `the closest value found failed at ${problem}`;
  }
  throw new SchemaGenerationError(mismatch);
}

/** A SchemaGenerationError as the client's error: a 400 naming the schema's field. */
export function generationRefusal(err: unknown, param: string): unknown {
  if (!(err instanceof SchemaGenerationError)) return err;
  return new AppError(
    'invalid_request',
    `The local model cannot produce JSON matching the schema in '${param}': ${err.mismatch}. Simplify the schema (docs/limits.md).`,
    { code: 'schema_not_generated', param },
  );
}

export function composeToolCall(tool: ToolDefinition, rand: () => number, index: number, toolIndex = 0): PlannedCall {
  const id = `call_${index}${Math.floor(rand() * 2 ** 48)
    .toString(36)
    .padStart(10, '0')}`;
  try {
    return { id, name: tool.function.name, arguments: jsonFor(tool.function.parameters ?? ANY_OBJECT, rand) };
  } catch (err) {
    throw generationRefusal(err, `tools[${toolIndex}].function.parameters`);
  }
}

/** The JSON answer response_format asks for: matching the json_schema, or an object holding the prose. */
export function jsonAnswer(
  format: NonNullable<CompletionParams['response_format']>,
  rand: () => number,
  prose: () => string,
): string {
  if (format.type === 'json_schema') {
    try {
      return jsonFor(format.json_schema.schema ?? ANY_OBJECT, rand);
    } catch (err) {
      throw generationRefusal(err, 'response_format.json_schema.schema');
    }
  }
  return JSON.stringify({ answer: prose() });
}
