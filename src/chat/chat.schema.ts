import type { JsonSchema } from '../validation.js';

const nullable = (t: string | string[]) => (Array.isArray(t) ? [...t, 'null'] : [t, 'null']);

export const ChatMessageSchema: JsonSchema = {
  type: 'object',
  required: ['role', 'content'],
  properties: {
    role: { type: 'string', maxLength: 20, description: 'system, user or assistant', example: 'user' },
    content: { type: 'string', maxLength: 50000 },
  },
};

/** ChatCompletionRequest exactly as the interface bounds it; extra OpenAI fields are accepted and ignored. */
export const ChatCompletionRequestSchema: JsonSchema = {
  type: 'object',
  required: ['model', 'messages'],
  properties: {
    model: { type: 'string', maxLength: 50, description: 'A model available to the caller\'s tier (GET /v1/models)' },
    messages: { type: 'array', minItems: 1, maxItems: 100, items: ChatMessageSchema, description: 'At least one message (as OpenAI requires); at most 100' },
    temperature: { type: nullable('number'), minimum: 0, maximum: 2, default: 1 },
    max_tokens: { type: nullable('integer'), minimum: 1, maximum: 8192 },
    top_p: { type: nullable('number'), minimum: 0, maximum: 1, default: 1 },
    n: { type: nullable('integer'), minimum: 1, maximum: 5, default: 1 },
    stream: { type: nullable('boolean'), default: false },
    stream_options: {
      type: nullable('object'),
      properties: { include_usage: { type: nullable('boolean') } },
    },
    stop: { type: nullable('array'), maxItems: 4, items: { type: 'string' } },
    presence_penalty: { type: nullable('number'), minimum: -2, maximum: 2, default: 0 },
    frequency_penalty: { type: nullable('number'), minimum: -2, maximum: 2, default: 0 },
    logit_bias: { type: nullable('object'), additionalProperties: { type: 'number' } },
    user: { type: nullable('string'), maxLength: 100 },
    persona: { type: nullable('string'), maxLength: 50, description: 'Name of a configured system prompt' },
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
  stream_options?: { include_usage?: boolean | null } | null;
  stop?: string[] | null;
  presence_penalty?: number | null;
  frequency_penalty?: number | null;
  logit_bias?: Record<string, number> | null;
  user?: string | null;
  persona?: string | null;
}
