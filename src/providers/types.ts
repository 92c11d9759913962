// The one interface every upstream adapter implements: an OpenAI-shaped request in, a stream of
// events out. Adapters know nothing of accounts, queues or billing.

export interface ChatMessage {
  role: string;
  content: string;
}

/** The request fields an adapter maps onto its provider, already validated by the web tier. */
export interface CompletionParams {
  /** The provider's own model name (the catalog's upstream_model), not the public id. */
  model: string;
  messages: ChatMessage[];
  temperature?: number;
  top_p?: number;
  max_tokens?: number;
  n?: number;
  stop?: string[];
  presence_penalty?: number;
  frequency_penalty?: number;
  logit_bias?: Record<string, number>;
  user?: string;
}

export type CompletionEvent =
  /** A piece of text of choice `index`. */
  | { type: 'delta'; index: number; content: string }
  /** Choice `index` ended: stop, length, content_filter, ... (OpenAI's words). */
  | { type: 'finish'; index: number; reason: string }
  /** The provider's own token counts, sent once, at the end, with the model it says answered when it says. */
  | { type: 'usage'; prompt_tokens: number; completion_tokens: number; model?: string };

export interface Provider {
  /** openai, anthropic, gemini, local. */
  readonly name: string;
  /** A short name for system_fingerprint and logs (for example "local-model-v1"). */
  readonly fingerprint?: string;
  /**
   * Throws AppError (422, naming the field in `param` and the 422 detail) when the provider
   * cannot honour a field, before anything is sent upstream.
   */
  check(params: CompletionParams): void;
  /** Streams the completion; aborting `signal` cancels the upstream request promptly. */
  stream(params: CompletionParams, signal: AbortSignal): AsyncIterable<CompletionEvent>;
  /**
   * The same events from one whole-answer upstream call, for a client that does not stream:
   * cheaper for both sides than streaming tokens nobody reads as they come. The answer must
   * arrive within the upstream timeout, the bound the web tier already puts on the silence
   * before a non-streaming answer. A client that leaves aborts it and, as with a stream
   * cancelled before its first token, nothing is recorded as produced. Every upstream adapter
   * has one; the local model (no upstream) serves those clients from stream().
   */
  complete?(params: CompletionParams, signal: AbortSignal): AsyncIterable<CompletionEvent>;
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
