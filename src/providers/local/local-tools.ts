// How the built-in model calls tools and answers in JSON, deterministically: the tool it calls and
// the JSON it writes follow from the request's seed (see planChoice), and the JSON is generated from
// the client's JSON Schema by json-schema-faker (seeded), then checked against that schema.
import { generateSync } from 'json-schema-faker';
import { schemaMismatch } from '../json-schema.js';
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

/**
 * JSON text that satisfies `schema`: json-schema-faker's value, checked with Ajv. A schema it cannot
 * satisfy (contradictory, or beyond what it generates) gets a few more seeds, then the answer is
 * thrown out as the schema's author would want, loudly.
 */
export function jsonFor(schema: JsonSchemaObject, rand: () => number): string {
  for (let attempt = 0; attempt < 5; attempt++) {
    const value = generateSync(schema, { seed: seedFrom(rand), maxDepth: 4, maxDefaultItems: 3 });
    if (schemaMismatch(schema, value) === undefined) return JSON.stringify(value);
  }
  throw new Error('the local model could not generate JSON matching the schema');
}

export function composeToolCall(tool: ToolDefinition, rand: () => number, index: number): PlannedCall {
  const id = `call_${index}${Math.floor(rand() * 2 ** 48)
    .toString(36)
    .padStart(10, '0')}`;
  return { id, name: tool.function.name, arguments: jsonFor(tool.function.parameters ?? ANY_OBJECT, rand) };
}

/** The JSON answer response_format asks for: matching the json_schema, or an object holding the prose. */
export function jsonAnswer(
  format: NonNullable<CompletionParams['response_format']>,
  rand: () => number,
  prose: () => string,
): string {
  if (format.type === 'json_schema') return jsonFor(format.json_schema.schema ?? ANY_OBJECT, rand);
  return JSON.stringify({ answer: prose() });
}
