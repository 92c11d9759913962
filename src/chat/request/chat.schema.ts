import { MAX_ANSWER_TOKENS } from '../../providers/json-schema-limits.js';
import { REASONING_EFFORTS, type ReasoningEffort } from '../../providers/types.js';
import type { JsonSchema } from '../../validation.js';

const nullable = (t: string | string[]) => (Array.isArray(t) ? [...t, 'null'] : [t, 'null']);

const MAX_MESSAGES = 100;
const MAX_ROLE_CHARS = 20;
/** Content parts of one message, and tool calls of one assistant message. */
const MAX_PARTS = 100;
const MAX_TOOL_CALLS = 128;
/** As many tools as OpenAI takes in one request. */
const MAX_TOOLS = 128;
const ID_CHARS = 64;
// Keys and punctuation of one content part or tool call, beyond the characters it carries (which
// count against the message's 50,000): {"type":"image_url","image_url":{"url":"","detail":"high"},
// "cache_control":{"type":"ephemeral","ttl":"1h"}}.
const PART_BYTES = 160;
// A message's keys and punctuation: {"role":"","content":"","name":"","tool_call_id":"","cache_control":{…}}.
const MESSAGE_BYTES = 128;
const TOOL_CALL_BYTES = 128;

/** What OpenAI allows as a function name (and Anthropic and Gemini as a tool name). */
export const FUNCTION_NAME_PATTERN = '^[a-zA-Z0-9_-]{1,64}$';

/**
 * The characters a message carries, all counted against its 50,000: its text (a string, or the text
 * of its parts), the URL of each image (a data URL whole), and the id, name and arguments of each
 * tool call it makes. JSON Schema bounds a string alone, so the sum is checked after validation
 * (chat.service.ts); a string content is bounded by the schema as well.
 */
export const MAX_CONTENT_CHARS = 50_000;

/**
 * The largest valid request in bytes: JSON Schema counts characters as code points, and one
 * astral character escaped as a surrogate pair (\ud83d\ude00) is 12 bytes, so every message's
 * characters and role at 12 bytes a character, with its keys and punctuation and more
 * for each content part and tool call it may hold, plus 1 MiB for the fields without a bound of
 * their own (stop, logit_bias, tools, response_format), fields the service ignores, and whitespace.
 */
export const CHAT_BODY_LIMIT_BYTES =
  MAX_MESSAGES *
    ((MAX_CONTENT_CHARS + MAX_ROLE_CHARS + ID_CHARS) * 12 +
      MESSAGE_BYTES +
      MAX_PARTS * PART_BYTES +
      MAX_TOOL_CALLS * TOOL_CALL_BYTES) +
  1024 * 1024;

/**
 * A prompt-cache breakpoint in Anthropic's form, where OpenRouter and LiteLLM take it: on a content
 * part, a whole message or a tool. Providers that cache on their own ignore it.
 */
const CacheControlSchema: JsonSchema = {
  type: nullable('object'),
  required: ['type'],
  properties: {
    type: { const: 'ephemeral' },
    ttl: { type: nullable('string'), enum: ['5m', '1h', null], description: '5m (the default) or 1h' },
  },
  description:
    'Anthropic models cache the prompt up to and including what this marks (at most 4 marks a request); other providers ignore it',
};

const TextPart: JsonSchema = {
  type: 'object',
  required: ['type', 'text'],
  properties: {
    type: { const: 'text' },
    text: { type: 'string', maxLength: MAX_CONTENT_CHARS },
    cache_control: CacheControlSchema,
  },
};

const ImagePart: JsonSchema = {
  type: 'object',
  required: ['type', 'image_url'],
  properties: {
    type: { const: 'image_url' },
    image_url: {
      type: 'object',
      required: ['url'],
      properties: {
        url: {
          type: 'string',
          maxLength: MAX_CONTENT_CHARS,
          'x-text': 'line',
          description:
            'A data URL (data:image/png;base64,…: PNG, JPEG, GIF or WebP), or an https URL for a provider that fetches images itself (OpenAI, Anthropic); the service never fetches one',
        },
        detail: { type: 'string', enum: ['auto', 'low', 'high'] },
      },
    },
    cache_control: CacheControlSchema,
  },
};

/** A content part: text always, an image for a model the catalog marks as taking images, in a user message. */
export const ContentPartSchema: JsonSchema = {
  type: 'object',
  discriminator: { propertyName: 'type' },
  oneOf: [TextPart, ImagePart],
};

export const ToolCallSchema: JsonSchema = {
  type: 'object',
  required: ['id', 'type', 'function'],
  properties: {
    id: { type: 'string', minLength: 1, maxLength: ID_CHARS, 'x-text': 'line' },
    type: { const: 'function' },
    function: {
      type: 'object',
      required: ['name', 'arguments'],
      properties: {
        name: { type: 'string', pattern: FUNCTION_NAME_PATTERN },
        arguments: { type: 'string', maxLength: MAX_CONTENT_CHARS, description: 'The arguments as JSON text' },
      },
    },
  },
};

export const ChatMessageSchema: JsonSchema = {
  type: 'object',
  required: ['role'],
  properties: {
    role: {
      type: 'string',
      maxLength: MAX_ROLE_CHARS,
      'x-text': 'line',
      description: 'system, developer, user, assistant or tool',
      example: 'user',
    },
    content: {
      type: ['string', 'array', 'null'],
      maxLength: MAX_CONTENT_CHARS,
      maxItems: MAX_PARTS,
      items: ContentPartSchema,
      description:
        'A string, or content parts (text; image_url in user messages). Null (or absent) only in an assistant message that makes tool calls. At most 50,000 characters in all: the text, each image URL and each tool call (id, name, arguments) count',
    },
    name: { type: nullable('string'), maxLength: ID_CHARS, 'x-text': 'line', description: "The participant's name" },
    tool_calls: {
      type: nullable('array'),
      maxItems: MAX_TOOL_CALLS,
      items: ToolCallSchema,
      description: 'The tool calls an assistant message made',
    },
    tool_call_id: {
      type: nullable('string'),
      maxLength: ID_CHARS,
      'x-text': 'line',
      description: 'In a tool message: the id of the call it answers, made by an earlier assistant message',
    },
    cache_control: {
      ...CacheControlSchema,
      description: "A cache breakpoint after the whole message (LiteLLM's form): its last content part is marked",
    },
  },
};

/** A JSON Schema object (checked against the JSON Schema meta-schema after validation). */
const JsonSchemaObject = (description: string): JsonSchema => ({ type: 'object', description });

export const ToolSchema: JsonSchema = {
  type: 'object',
  required: ['type', 'function'],
  properties: {
    type: { const: 'function' },
    function: {
      type: 'object',
      required: ['name'],
      properties: {
        name: { type: 'string', pattern: FUNCTION_NAME_PATTERN },
        description: { type: nullable('string') },
        parameters: {
          ...JsonSchemaObject(
            'The arguments, as a JSON Schema object (draft 2020-12 or draft-07); left out, the function takes none',
          ),
          type: nullable('object'),
        },
        strict: { type: nullable('boolean') },
      },
    },
    cache_control: {
      ...CacheControlSchema,
      description: 'A cache breakpoint after the tool definitions up to this one',
    },
  },
};

const ResponseFormatSchema: JsonSchema = {
  type: 'object',
  discriminator: { propertyName: 'type' },
  oneOf: [
    { type: 'object', required: ['type'], properties: { type: { const: 'text' } } },
    { type: 'object', required: ['type'], properties: { type: { const: 'json_object' } } },
    {
      type: 'object',
      required: ['type', 'json_schema'],
      properties: {
        type: { const: 'json_schema' },
        json_schema: {
          type: 'object',
          required: ['name'],
          properties: {
            name: { type: 'string', pattern: FUNCTION_NAME_PATTERN },
            description: { type: nullable('string') },
            schema: { ...JsonSchemaObject('The JSON Schema the answer must match'), type: nullable('object') },
            strict: {
              type: nullable('boolean'),
              description: 'true: the answer is checked against the schema before it is returned',
            },
          },
        },
      },
    },
  ],
};

const TOOL_CHOICE_WORDS = '^(none|auto|required)$';

/**
 * ChatCompletionRequest: the interface's fields and bounds, and the forms OpenAI's clients send
 * beside them (stop as a string, content parts, tools, structured output, …). Other fields are
 * ignored, except the OpenAI parameters below, which would change what the answer is: silently
 * ignoring one would hand the client something it did not ask for, so each is refused with a 422
 * naming it.
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
    max_tokens: { type: nullable('integer'), minimum: 1, maximum: MAX_ANSWER_TOKENS },
    max_completion_tokens: {
      type: nullable('integer'),
      minimum: 1,
      maximum: MAX_ANSWER_TOKENS,
      description: "max_tokens' other name (OpenAI's, on newer models); with both set they must agree",
    },
    top_p: { type: nullable('number'), minimum: 0, maximum: 1, default: 1 },
    n: {
      type: nullable('integer'),
      minimum: 1,
      maximum: 5,
      default: 1,
      description: 'Choices to generate, on every model (where a provider has none, as that many calls, billed once)',
    },
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
    stop: {
      type: ['string', 'array', 'null'],
      maxItems: 4,
      items: { type: 'string' },
      description: 'A stop sequence, or up to 4',
    },
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
    seed: {
      type: nullable('integer'),
      minimum: Number.MIN_SAFE_INTEGER,
      maximum: Number.MAX_SAFE_INTEGER,
      description:
        'Sampling seed, best effort where the provider has one (the local model answers the same to the same seed)',
    },
    tools: {
      type: nullable('array'),
      maxItems: MAX_TOOLS,
      items: ToolSchema,
      description: 'Functions the model may call; names unique',
    },
    tool_choice: {
      type: ['string', 'object', 'null'],
      pattern: TOOL_CHOICE_WORDS,
      required: ['type', 'function'],
      properties: {
        type: { const: 'function' },
        function: {
          type: 'object',
          required: ['name'],
          properties: { name: { type: 'string', pattern: FUNCTION_NAME_PATTERN } },
        },
      },
      description: 'none, auto, required, or {"type": "function", "function": {"name": …}} naming one of the tools',
    },
    parallel_tool_calls: {
      type: nullable('boolean'),
      description: 'false: at most one tool call per answer',
    },
    response_format: ResponseFormatSchema,
    reasoning_effort: {
      type: nullable('string'),
      enum: [...REASONING_EFFORTS, null],
      description:
        "How much the model thinks before it answers, mapped to its provider's thinking settings (docs/responses-mapping.md); a model without them ignores it",
    },
  },
};

export interface RequestCacheControl {
  type: 'ephemeral';
  ttl?: '5m' | '1h' | null;
}

export type ContentPart =
  | { type: 'text'; text: string; cache_control?: RequestCacheControl | null }
  | {
      type: 'image_url';
      image_url: { url: string; detail?: 'auto' | 'low' | 'high' };
      cache_control?: RequestCacheControl | null;
    };

export interface RequestToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface RequestMessage {
  role: string;
  content?: string | ContentPart[] | null;
  name?: string | null;
  tool_calls?: RequestToolCall[] | null;
  tool_call_id?: string | null;
  cache_control?: RequestCacheControl | null;
}

export interface RequestTool {
  type: 'function';
  function: {
    name: string;
    description?: string | null;
    parameters?: Record<string, unknown> | null;
    strict?: boolean | null;
  };
  cache_control?: RequestCacheControl | null;
}

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | {
      type: 'json_schema';
      json_schema: {
        name: string;
        description?: string | null;
        schema?: Record<string, unknown> | null;
        strict?: boolean | null;
      };
    };

export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };

export interface ChatCompletionRequest {
  model: string;
  messages: RequestMessage[];
  temperature?: number | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  top_p?: number | null;
  n?: number | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null; resumable?: boolean | null } | null;
  stop?: string | string[] | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
  user?: string | null;
  persona?: string | null;
  seed?: number | null;
  tools?: RequestTool[] | null;
  tool_choice?: ToolChoice | null;
  parallel_tool_calls?: boolean | null;
  response_format?: ResponseFormat | null;
  reasoning_effort?: ReasoningEffort | null;
}

const NO_FUNCTIONS = 'The legacy functions API is not supported; send tools (and tool_choice) instead.';

/** OpenAI request parameters the service cannot honour, and what to tell a client that sends one. */
export const UNSUPPORTED_OPENAI_FIELDS: Record<string, { refuse: (value: unknown) => boolean; msg: string }> = {
  functions: { refuse: (v) => Array.isArray(v) && v.length > 0, msg: NO_FUNCTIONS },
  function_call: { refuse: (v) => v !== 'none', msg: NO_FUNCTIONS },
  logprobs: {
    refuse: (v) => v === true,
    msg: 'Log probabilities are not returned by this service; leave logprobs out or false.',
  },
  top_logprobs: {
    refuse: (v) => typeof v === 'number' && v > 0,
    msg: 'Log probabilities are not returned by this service; leave top_logprobs out.',
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
              content: {
                type: ['string', 'null'],
                description: 'The text; null when the answer is only tool calls',
              },
              refusal: { type: 'null' },
              tool_calls: {
                type: 'array',
                description: 'The tool calls the model made (finish_reason tool_calls)',
                items: {
                  type: 'object',
                  required: ['id', 'type', 'function'],
                  properties: {
                    id: { type: 'string' },
                    type: { type: 'string', const: 'function' },
                    function: {
                      type: 'object',
                      required: ['name', 'arguments'],
                      properties: {
                        name: { type: 'string' },
                        arguments: { type: 'string', description: 'JSON text' },
                      },
                    },
                  },
                },
              },
            },
          },
          logprobs: { type: 'null' },
          finish_reason: {
            type: 'string',
            description:
              'stop when the model finished, length at max_tokens, tool_calls when it called tools, content_filter when the provider withheld content',
          },
        },
      },
    },
    usage: Usage,
  },
};
