// The one interface every upstream adapter implements: an OpenAI-shaped request in, a stream of
// events out. Adapters know nothing of accounts, queues or billing.

/**
 * A prompt-cache breakpoint in Anthropic's words, accepted in the OpenAI request form as OpenRouter
 * and LiteLLM accept it: the prompt up to and including the part it marks may be cached, for 5
 * minutes (the default) or an hour. Providers that cache on their own ignore it.
 */
export interface CacheControl {
  type: 'ephemeral';
  ttl?: '5m' | '1h';
}

export type ContentPart =
  | { type: 'text'; text: string; cache_control?: CacheControl }
  /** A data URL, or an https URL for a provider that fetches images itself. */
  | { type: 'image_url'; image_url: { url: string; detail?: 'auto' | 'low' | 'high' }; cache_control?: CacheControl };

/** A call an assistant message made: `arguments` is JSON text. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatMessage {
  /** system, developer, user, assistant or tool. */
  role: string;
  /** Null only in an assistant message that makes tool calls. */
  content: string | ContentPart[] | null;
  name?: string;
  /** The calls an assistant message made. */
  tool_calls?: ToolCall[];
  /** In a tool message: the call it answers. */
  tool_call_id?: string;
  /** A breakpoint after the whole message (LiteLLM's form): its last content part is marked. */
  cache_control?: CacheControl;
}

/** A JSON Schema object, as the client sent it. */
export type JsonSchemaObject = Record<string, unknown>;

export interface ToolDefinition {
  type: 'function';
  function: { name: string; description?: string; parameters?: JsonSchemaObject; strict?: boolean };
  /** A breakpoint after the tool definitions up to this one. */
  cache_control?: CacheControl;
}

export type ToolChoice = 'none' | 'auto' | 'required' | { type: 'function'; function: { name: string } };

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | {
      type: 'json_schema';
      json_schema: { name: string; description?: string; schema?: JsonSchemaObject; strict?: boolean };
    };

/**
 * How much a model thinks before it answers, in OpenAI's words (its chat `reasoning_effort`, the
 * Responses API's `reasoning.effort`). Each adapter maps it onto its provider's thinking settings.
 */
export const REASONING_EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh', 'max'] as const;
export type ReasoningEffort = (typeof REASONING_EFFORTS)[number];

/** The request fields an adapter maps onto its provider, already validated by the web tier. */
export interface CompletionParams {
  /** The provider's own model name (the catalog's upstream_model), not the public id. */
  model: string;
  messages: ChatMessage[];
  temperature?: number;
  top_p?: number;
  /** max_tokens, or max_completion_tokens (its other name). */
  max_tokens?: number;
  n?: number;
  stop?: string[];
  presence_penalty?: number;
  frequency_penalty?: number;
  logit_bias?: Record<string, number>;
  user?: string;
  seed?: number;
  /** Present only when non-empty. */
  tools?: ToolDefinition[];
  /** Only with tools. */
  tool_choice?: ToolChoice;
  /** Only with tools. */
  parallel_tool_calls?: boolean;
  /** Absent for plain text. */
  response_format?: Exclude<ResponseFormat, { type: 'text' }>;
  /** Only for a model the catalog marks as reasoning: elsewhere it is left out before the adapter. */
  reasoning_effort?: ReasoningEffort;
  /**
   * Whose prompt cache the request may read and write: an opaque key set by the worker (the
   * account), never by a client. A provider with a cache of its own (the local model) keeps
   * entries of different scopes apart.
   */
  cache_scope?: string;
}

/**
 * A completion's token counts as its provider reports them, in OpenAI's meaning: the cached,
 * written and reasoning figures are parts of the prompt and completion counts, never added to them.
 */
export interface TokenUsage {
  /** Every prompt token, those read from or written to the prompt cache included. */
  prompt_tokens: number;
  /** Every completion token, reasoning included. */
  completion_tokens: number;
  /** Prompt tokens read from the provider's prompt cache (billed at the cached-input price). */
  cached_tokens?: number;
  /** Prompt tokens written to the prompt cache (Anthropic), at every TTL. */
  cache_write_tokens?: number;
  /** Of cache_write_tokens, those written with the 1-hour TTL (priced apart). */
  cache_write_1h_tokens?: number;
  /** Completion tokens the model spent thinking. */
  reasoning_tokens?: number;
}

export type UpstreamEvent =
  /** A piece of text of choice `index`. */
  | { type: 'delta'; index: number; content: string }
  /**
   * A piece of tool call `call` (0, 1, … within the choice) of choice `index`: its first piece
   * carries the call's id and function name, every piece a fragment of its JSON arguments.
   */
  | { type: 'tool_call'; index: number; call: number; id?: string; name?: string; arguments: string }
  /** Choice `index` ended: stop, length, content_filter, ... (OpenAI's words). */
  | { type: 'finish'; index: number; reason: string }
  /** The provider's own token counts, sent once, at the end, with the model it says answered when it says. */
  | ({ type: 'usage'; model?: string } & TokenUsage);

export interface Provider {
  /** openai, anthropic, gemini, local. */
  readonly name: string;
  /** A short name for system_fingerprint and logs (for example "local-model-v1"). */
  readonly fingerprint?: string;
  /**
   * The most choices one upstream call returns (Anthropic's Messages API: 1); unset, any n. A
   * larger n is made as n calls merged into one answer (fan-out.ts), which the registry arranges.
   */
  readonly maxChoices?: number;
  /** The provider a wrapper (fan-out.ts, checked-output.ts) is built around. */
  readonly wraps?: Provider;
  /**
   * Throws AppError (422, naming the field in `param` and the 422 detail) when the provider
   * cannot honour a field, before anything is sent upstream.
   */
  check(params: CompletionParams): void;
  /** Streams the completion; aborting `signal` cancels the upstream request promptly. */
  stream(params: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent>;
  /**
   * The same events from one whole-answer upstream call, for a client that does not stream:
   * cheaper for both sides than streaming tokens nobody reads as they come. The answer must
   * arrive within the upstream timeout, the bound the web tier already puts on the silence
   * before a non-streaming answer. A client that leaves aborts it and, as with a stream
   * cancelled before its first token, nothing is recorded as produced. Every upstream adapter
   * has one; the local model (no upstream) serves those clients from stream().
   */
  complete?(params: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent>;
}

/** The adapter underneath any wrappers. */
export function adapterOf(provider: Provider): Provider {
  return provider.wraps ? adapterOf(provider.wraps) : provider;
}

/** An upstream failure, classified so the worker knows whether a retry can help. */
export class ProviderError extends Error {
  constructor(
    message: string,
    readonly status: number,
    readonly retryable: boolean,
    readonly retryAfterMs?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ProviderError';
  }
}
