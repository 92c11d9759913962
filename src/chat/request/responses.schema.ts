// The Responses API's request (POST /v1/responses) as this service takes it, and the Response it
// answers. A Responses request is translated onto the chat completion job (responses-request.ts),
// so its bounds are chat's: a message item's characters, tools, schemas and max_output_tokens are
// checked by the same rules, each refusal named at the Responses field it came from.
import { MAX_ANSWER_TOKENS } from '../../providers/json-schema-limits.js';
import { REASONING_EFFORTS, type ReasoningEffort } from '../../providers/types.js';
import type { JsonSchema } from '../../validation.js';
import { FUNCTION_NAME_PATTERN, MAX_CONTENT_CHARS } from './chat.schema.js';

const nullable = (t: string | string[]) => (Array.isArray(t) ? [...t, 'null'] : [t, 'null']);

/** As many items as chat takes messages, plus one for each tool call's own item (a call and its output). */
export const MAX_INPUT_ITEMS = 300;
const MAX_PARTS = 100;
const MAX_TOOLS = 128;
const ID_CHARS = 64;
const MAX_METADATA_KEYS = 16;

const Part: JsonSchema = {
  type: 'object',
  required: ['type'],
  properties: {
    type: {
      type: 'string',
      maxLength: 40,
      'x-text': 'line',
      description: 'input_text, output_text, refusal or input_image (others are refused with a 400)',
    },
    text: { type: 'string', maxLength: MAX_CONTENT_CHARS },
    refusal: { type: 'string', maxLength: MAX_CONTENT_CHARS },
    image_url: {
      type: nullable('string'),
      maxLength: MAX_CONTENT_CHARS,
      'x-text': 'line',
      description: 'A data URL, or an https URL for a provider that fetches images itself',
    },
    detail: { type: nullable('string'), enum: ['auto', 'low', 'high', null] },
  },
};

const Content: JsonSchema = {
  type: ['string', 'array'],
  maxLength: MAX_CONTENT_CHARS,
  maxItems: MAX_PARTS,
  items: Part,
};

/**
 * One input item: a message (`type` may be left out), a `function_call`, a `function_call_output`
 * or a `reasoning` item. What each type requires is checked after this schema, so that a type the
 * service does not take is a 400 naming it.
 */
const InputItem: JsonSchema = {
  type: 'object',
  properties: {
    type: {
      type: 'string',
      maxLength: 40,
      'x-text': 'line',
      description: 'message (the default), function_call, function_call_output or reasoning',
    },
    role: {
      type: 'string',
      enum: ['user', 'assistant', 'system', 'developer'],
      description: 'A message item: who wrote it',
    },
    content: { ...Content, description: 'A message item: a string, or parts' },
    id: { type: nullable('string'), maxLength: ID_CHARS, 'x-text': 'line' },
    status: { type: nullable('string'), enum: ['in_progress', 'completed', 'incomplete', null] },
    call_id: {
      type: 'string',
      minLength: 1,
      maxLength: ID_CHARS,
      'x-text': 'line',
      description: 'A function_call or function_call_output item: the call',
    },
    name: { type: 'string', pattern: FUNCTION_NAME_PATTERN, description: 'A function_call item: the function' },
    arguments: {
      type: 'string',
      maxLength: MAX_CONTENT_CHARS,
      description: 'A function_call item: its arguments as JSON text',
    },
    output: {
      type: ['string', 'array'],
      maxLength: MAX_CONTENT_CHARS,
      maxItems: MAX_PARTS,
      items: Part,
      description: 'A function_call_output item: what the call returned',
    },
    summary: { type: 'array', description: 'A reasoning item (accepted; a chat model has nowhere to take it)' },
    encrypted_content: { type: nullable('string') },
  },
};

/** A function tool in the Responses API's flat shape. */
const FunctionTool: JsonSchema = {
  type: 'object',
  required: ['type'],
  properties: {
    type: { type: 'string', maxLength: 40, 'x-text': 'line', description: 'function (others are refused with a 400)' },
    name: { type: 'string', pattern: FUNCTION_NAME_PATTERN },
    description: { type: nullable('string') },
    parameters: {
      type: nullable('object'),
      description: 'The arguments, as a JSON Schema object; left out, the function takes none',
    },
    strict: { type: nullable('boolean') },
  },
};

const TextFormat: JsonSchema = {
  type: 'object',
  required: ['type'],
  properties: {
    type: { type: 'string', enum: ['text', 'json_object', 'json_schema'] },
    name: { type: 'string', pattern: FUNCTION_NAME_PATTERN, description: "json_schema: the schema's name" },
    description: { type: nullable('string') },
    schema: { type: 'object', description: 'json_schema: the JSON Schema the answer must match' },
    strict: {
      type: nullable('boolean'),
      description: 'true: the answer is checked against the schema before it is returned',
    },
  },
};

/** CreateResponse: the fields of OpenAI's request the service takes (docs/api.md#responses). */
export const CreateResponseSchema: JsonSchema = {
  type: 'object',
  required: ['model', 'input'],
  properties: {
    model: {
      type: 'string',
      maxLength: 50,
      'x-text': 'line',
      description: "A model available to the caller's tier (GET /v1/models)",
    },
    input: {
      type: ['string', 'array'],
      maxLength: MAX_CONTENT_CHARS,
      minItems: 1,
      maxItems: MAX_INPUT_ITEMS,
      items: InputItem,
      description: 'A user message as a string, or items: messages, function calls and their outputs, reasoning',
    },
    instructions: {
      type: nullable('string'),
      maxLength: MAX_CONTENT_CHARS,
      description: 'A system message put before the input',
    },
    tools: { type: nullable('array'), maxItems: MAX_TOOLS, items: FunctionTool, description: 'Function tools' },
    tool_choice: {
      type: ['string', 'object', 'null'],
      pattern: '^(none|auto|required)$',
      required: ['type'],
      properties: {
        type: { type: 'string', maxLength: 40, 'x-text': 'line' },
        name: { type: 'string', pattern: FUNCTION_NAME_PATTERN },
      },
      description: 'none, auto, required, or {"type": "function", "name": …} naming one of the tools',
    },
    parallel_tool_calls: { type: nullable('boolean') },
    text: {
      type: nullable('object'),
      properties: {
        format: TextFormat,
        verbosity: { type: nullable('string'), enum: ['low', 'medium', 'high', null] },
      },
    },
    max_output_tokens: { type: nullable('integer'), minimum: 1, maximum: MAX_ANSWER_TOKENS },
    temperature: { type: nullable('number'), minimum: 0, maximum: 2 },
    top_p: { type: nullable('number'), minimum: 0, maximum: 1 },
    reasoning: {
      type: nullable('object'),
      properties: {
        effort: {
          type: nullable('string'),
          enum: [...REASONING_EFFORTS, null],
          description: "The chat request's reasoning_effort: how much the model thinks before it answers",
        },
        summary: { type: nullable('string'), enum: ['auto', 'concise', 'detailed', null] },
      },
    },
    stream: { type: nullable('boolean') },
    store: { type: nullable('boolean') },
    background: { type: nullable('boolean') },
    previous_response_id: { type: nullable('string'), maxLength: 100, 'x-text': 'line' },
    metadata: {
      type: nullable('object'),
      maxProperties: MAX_METADATA_KEYS,
      propertyNames: { maxLength: 64 },
      additionalProperties: { type: 'string', maxLength: 512 },
      description: 'Up to 16 string pairs, echoed in the Response',
    },
    user: { type: nullable('string'), maxLength: 100, 'x-text': 'line' },
  },
};

export type InputPart = {
  type: string;
  text?: string;
  refusal?: string;
  image_url?: string | null;
  detail?: 'auto' | 'low' | 'high' | null;
};

export interface InputItem {
  type?: string;
  role?: 'user' | 'assistant' | 'system' | 'developer';
  content?: string | InputPart[];
  id?: string | null;
  status?: string | null;
  call_id?: string;
  name?: string;
  arguments?: string;
  output?: string | InputPart[];
}

export interface FunctionTool {
  type: string;
  name?: string;
  description?: string | null;
  parameters?: Record<string, unknown> | null;
  strict?: boolean | null;
}

export interface TextFormat {
  type: 'text' | 'json_object' | 'json_schema';
  name?: string;
  description?: string | null;
  schema?: Record<string, unknown>;
  strict?: boolean | null;
}

export interface CreateResponseRequest {
  model: string;
  input: string | InputItem[];
  instructions?: string | null;
  tools?: FunctionTool[] | null;
  tool_choice?: 'none' | 'auto' | 'required' | { type: string; name?: string } | null;
  parallel_tool_calls?: boolean | null;
  text?: { format?: TextFormat; verbosity?: string | null } | null;
  max_output_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  reasoning?: { effort?: ReasoningEffort | null; summary?: string | null } | null;
  stream?: boolean | null;
  store?: boolean | null;
  background?: boolean | null;
  previous_response_id?: string | null;
  metadata?: Record<string, string> | null;
  user?: string | null;
}

const OutputText: JsonSchema = {
  type: 'object',
  required: ['type', 'text', 'annotations'],
  properties: {
    type: { const: 'output_text' },
    text: { type: 'string' },
    annotations: { type: 'array', maxItems: 0 },
    logprobs: { type: 'array', maxItems: 0 },
  },
};

/** OpenAI's Response object as this service answers it (tested against OpenAI's own schema). */
export const ResponseSchema: JsonSchema = {
  type: 'object',
  // usage is there once the response has ended: a queued (background) one has none yet.
  required: ['id', 'object', 'created_at', 'status', 'model', 'output', 'error', 'incomplete_details'],
  properties: {
    id: { type: 'string', example: 'resp_…' },
    object: { const: 'response' },
    created_at: { type: 'integer', description: 'Unix time in seconds' },
    status: {
      type: 'string',
      enum: ['completed', 'incomplete', 'failed', 'in_progress', 'queued', 'cancelled'],
      description:
        'incomplete when the answer stopped at max_output_tokens (or a provider withheld content); queued, then in_progress and cancelled, for background responses',
    },
    model: { type: 'string' },
    output: {
      type: 'array',
      items: {
        type: 'object',
        discriminator: { propertyName: 'type' },
        oneOf: [
          {
            type: 'object',
            required: ['type', 'id', 'role', 'status', 'content'],
            properties: {
              type: { const: 'message' },
              id: { type: 'string', example: 'msg_…' },
              role: { const: 'assistant' },
              status: { type: 'string', enum: ['completed', 'incomplete', 'in_progress'] },
              content: { type: 'array', items: OutputText },
            },
          },
          {
            type: 'object',
            required: ['type', 'id', 'call_id', 'name', 'arguments', 'status'],
            properties: {
              type: { const: 'function_call' },
              id: { type: 'string', example: 'fc_…' },
              call_id: { type: 'string', description: 'Send it back in a function_call_output item' },
              name: { type: 'string' },
              arguments: { type: 'string', description: 'JSON text' },
              status: { type: 'string', enum: ['completed', 'incomplete', 'in_progress'] },
            },
          },
        ],
      },
    },
    usage: {
      type: ['object', 'null'],
      required: ['input_tokens', 'output_tokens', 'total_tokens', 'input_tokens_details', 'output_tokens_details'],
      properties: {
        input_tokens: { type: 'integer' },
        input_tokens_details: {
          type: 'object',
          required: ['cached_tokens'],
          properties: { cached_tokens: { type: 'integer' } },
        },
        output_tokens: { type: 'integer' },
        output_tokens_details: {
          type: 'object',
          required: ['reasoning_tokens'],
          properties: { reasoning_tokens: { type: 'integer' } },
        },
        total_tokens: { type: 'integer' },
        cost: {
          type: 'number',
          minimum: 0,
          description: 'What the request costs in USD, exactly as the usage ledger has it (as chat usage.cost)',
        },
      },
    },
    error: {
      type: ['object', 'null'],
      properties: { code: { type: 'string' }, message: { type: 'string' } },
    },
    incomplete_details: {
      type: ['object', 'null'],
      properties: { reason: { type: 'string', enum: ['max_output_tokens', 'content_filter'] } },
    },
  },
};
