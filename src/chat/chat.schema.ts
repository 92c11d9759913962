import type { JsonSchema } from '../validation.js';

const nullable = (t: string | string[]) => (Array.isArray(t) ? [...t, 'null'] : [t, 'null']);

const MAX_MESSAGES = 100;
const MAX_CONTENT_CHARS = 50_000;
const MAX_ROLE_CHARS = 20;

/**
 * The largest valid request in bytes: JSON Schema counts characters as code points, and one
 * astral character escaped as a surrogate pair (\ud83d\ude00) is 12 bytes, so every message's
 * content and role at 12 bytes a character, with 64 bytes of keys and punctuation each, plus
 * 1 MiB for the fields without a bound of their own (stop, logit_bias), fields the service
 * ignores, and whitespace.
 */
export const CHAT_BODY_LIMIT_BYTES = MAX_MESSAGES * ((MAX_CONTENT_CHARS + MAX_ROLE_CHARS) * 12 + 64) + 1024 * 1024;

export const ChatMessageSchema: JsonSchema = {
  type: 'object',
  required: ['role', 'content'],
  properties: {
    role: {
      type: 'string',
      maxLength: MAX_ROLE_CHARS,
      'x-text': 'line',
      description: 'system, developer, user or assistant',
      example: 'user',
    },
    content: { type: 'string', maxLength: MAX_CONTENT_CHARS },
  },
};

/**
 * ChatCompletionRequest exactly as the interface bounds it. Other fields are ignored, except the
 * OpenAI parameters below, which would change what the answer is: silently ignoring one would
 * hand the client something it did not ask for, so each is refused with a 422 naming it.
 */
export const ChatCompletionRequestSchema: JsonSchema = {
  type: 'object',
  required: ['model', 'messages'],
  properties: {
    model: {
      type: 'string',
      maxLength: 50,
      'x-text': 'line',
      description: "A model available to the caller's tier (GET /v1/models)",
    },
    messages: {
      type: 'array',
      minItems: 1,
      maxItems: MAX_MESSAGES,
      items: ChatMessageSchema,
      description: 'At least one message (as OpenAI requires); at most 100',
    },
    temperature: { type: nullable('number'), minimum: 0, maximum: 2, default: 1 },
    max_tokens: { type: nullable('integer'), minimum: 1, maximum: 8192 },
    top_p: { type: nullable('number'), minimum: 0, maximum: 1, default: 1 },
    n: { type: nullable('integer'), minimum: 1, maximum: 5, default: 1 },
    stream: { type: nullable('boolean'), default: false },
    stream_options: {
      type: nullable('object'),
      properties: {
        include_usage: {
          type: nullable('boolean'),
          description: 'A last chunk carries the usage (and every chunk `"usage": null`)',
        },
        resumable: {
          type: nullable('boolean'),
          description:
            'Only with `stream: true`. The answer outlives its connection: a client that loses it resumes with GET /v1/chat/completions/{id}/stream and Last-Event-ID, and the generation runs on for RESUME_GRACE_SECONDS with no reader before it is cancelled. Without it, a disconnect cancels the request at once.',
        },
      },
    },
    stop: { type: nullable('array'), maxItems: 4, items: { type: 'string' } },
    presence_penalty: { type: nullable('number'), minimum: -2, maximum: 2, default: 0 },
    frequency_penalty: { type: nullable('number'), minimum: -2, maximum: 2, default: 0 },
    logit_bias: { type: nullable('object'), additionalProperties: { type: 'number' } },
    user: { type: nullable('string'), maxLength: 100, 'x-text': 'line' },
    persona: {
      type: nullable('string'),
      maxLength: 50,
      'x-text': 'line',
      description: 'Name of a configured system prompt',
    },
  },
};

export interface ChatCompletionRequest {
  model: string;
  messages: { role: string; content: string }[];
  temperature?: number | null;
  max_tokens?: number | null;
  top_p?: number | null;
  n?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null; resumable?: boolean | null } | null;
  stop?: string[] | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
  user?: string | null;
  persona?: string | null;
}

const NO_TOOLS = 'Tool and function calling is not supported: answers are plain assistant text. Remove this field.';

/** OpenAI request parameters the service cannot honour, and what to tell a client that sends one. */
export const UNSUPPORTED_OPENAI_FIELDS: Record<string, { refuse: (value: unknown) => boolean; msg: string }> = {
  tools: { refuse: (v) => Array.isArray(v) && v.length > 0, msg: NO_TOOLS },
  tool_choice: { refuse: (v) => v !== 'none', msg: NO_TOOLS },
  parallel_tool_calls: { refuse: () => true, msg: NO_TOOLS },
  functions: { refuse: (v) => Array.isArray(v) && v.length > 0, msg: NO_TOOLS },
  function_call: { refuse: (v) => v !== 'none', msg: NO_TOOLS },
  response_format: {
    refuse: (v) => (v as { type?: unknown } | null)?.type !== 'text',
    msg: 'Only plain text answers are supported (response_format type "text"); ask for JSON in the messages instead.',
  },
  logprobs: {
    refuse: (v) => v === true,
    msg: 'Log probabilities are not returned by this service; leave logprobs out or false.',
  },
  top_logprobs: {
    refuse: (v) => typeof v === 'number' && v > 0,
    msg: 'Log probabilities are not returned by this service; leave top_logprobs out.',
  },
  max_completion_tokens: {
    refuse: () => true,
    msg: 'Use max_tokens (1 to 8192) to bound the answer; max_completion_tokens is not read.',
  },
  modalities: {
    refuse: (v) => Array.isArray(v) && v.some((m) => m !== 'text'),
    msg: 'Only text answers are supported.',
  },
  audio: { refuse: () => true, msg: 'Audio answers are not supported.' },
};

const Usage: JsonSchema = {
  type: 'object',
  required: ['prompt_tokens', 'completion_tokens', 'total_tokens'],
  properties: {
    prompt_tokens: { type: 'integer' },
    completion_tokens: { type: 'integer' },
    total_tokens: { type: 'integer' },
    cost: {
      type: 'number',
      minimum: 0,
      description:
        "What the request costs in USD (OpenRouter's usage.cost), exactly as the usage ledger has it: 0 on the free tier. A model's costs over a month, summed and rounded half up to the cent, are its invoice line.",
    },
  },
};

/** The non-streaming answer, in OpenAI's chat.completion shape (tested against OpenAI's own schema). */
export const ChatCompletionSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'object', 'created', 'model', 'choices', 'usage'],
  properties: {
    id: { type: 'string', example: 'chatcmpl-…' },
    object: { type: 'string', const: 'chat.completion' },
    created: { type: 'integer', description: 'Unix time in seconds' },
    model: { type: 'string' },
    system_fingerprint: {
      type: 'string',
      description: 'Present when the backend names one (local-model-v1 for the built-in model)',
    },
    choices: {
      type: 'array',
      items: {
        type: 'object',
        required: ['index', 'message', 'finish_reason'],
        properties: {
          index: { type: 'integer' },
          message: {
            type: 'object',
            required: ['role', 'content', 'refusal'],
            properties: {
              role: { type: 'string', const: 'assistant' },
              content: { type: 'string' },
              refusal: { type: 'null' },
            },
          },
          logprobs: { type: 'null' },
          finish_reason: {
            type: 'string',
            description:
              'stop when the model finished, length at max_tokens, content_filter when the provider withheld content',
          },
        },
      },
    },
    usage: Usage,
  },
};
