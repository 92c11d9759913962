import Anthropic from '@anthropic-ai/sdk';
import {
  assertComplete,
  connectionFailure,
  httpFailure,
  retryAfterMs,
  UpstreamCall,
  wholeAnswer,
  type UpstreamSettings,
} from '../upstream.js';
import { ProviderError, type CompletionEvent, type CompletionParams, type Provider } from '../types.js';
import { checkAnthropicRequest } from './anthropic.rules.js';

const PROVIDER = 'Anthropic';

export interface AnthropicSettings extends UpstreamSettings {
  /** max_tokens is required by the Messages API; this is sent when the request sets none. */
  defaultMaxTokens: number;
}

/** Anthropic's stop reasons in OpenAI's words. */
const FINISH: Record<string, string> = {
  end_turn: 'stop',
  stop_sequence: 'stop',
  max_tokens: 'length',
  model_context_window_exceeded: 'length',
  refusal: 'content_filter',
  tool_use: 'tool_calls',
  pause_turn: 'stop',
};

function classify(err: unknown): ProviderError {
  if (err instanceof Anthropic.APIError && typeof err.status === 'number') {
    return httpFailure(
      PROVIDER,
      err.status,
      err.apiMessage ?? err.message,
      retryAfterMs(err.headers as Headers | undefined),
      err,
    );
  }
  // An `event: error` inside the stream (overloaded_error, api_error) arrives without a status.
  if (err instanceof Anthropic.APIError && !(err instanceof Anthropic.APIConnectionError)) {
    const overloaded = err.type === 'overloaded_error' || err.type === 'rate_limit_error';
    return new ProviderError(
      `${PROVIDER} stream failed: ${err.apiMessage ?? err.message}`,
      overloaded ? 529 : 502,
      true,
      undefined,
      { cause: err },
    );
  }
  return connectionFailure(PROVIDER, err);
}

type MessageCreateBody = Anthropic.MessageCreateParamsStreaming;

/**
 * The Messages API request: system (and developer) messages become the top-level `system`,
 * stop becomes stop_sequences, user becomes metadata.user_id. Consecutive turns of one role are
 * sent as they are; the API accepts and merges them.
 */
export function toAnthropicRequest(p: CompletionParams, defaultMaxTokens: number): MessageCreateBody {
  const system = p.messages.filter((m) => m.role === 'system' || m.role === 'developer').map((m) => m.content);
  const body: MessageCreateBody = {
    model: p.model,
    max_tokens: p.max_tokens ?? defaultMaxTokens,
    messages: p.messages
      .filter((m) => m.role === 'user' || m.role === 'assistant')
      .map((m) => ({ role: m.role as 'user' | 'assistant', content: m.content })),
    stream: true,
  };
  if (system.length) body.system = system.join('\n\n');
  if (p.stop?.length) body.stop_sequences = p.stop;
  if (p.user !== undefined) body.metadata = { user_id: p.user };
  return body;
}

/**
 * Claude through the official SDK, which speaks API version 2026-10-21. That version removed the
 * sampling parameters (temperature, top_p, top_k: a 400 even at their defaults), so a request's
 * temperature or top_p is accepted only at 1, where leaving it out samples identically.
 */
export class AnthropicProvider implements Provider {
  readonly name = 'anthropic';
  private readonly client: Anthropic;

  constructor(private readonly settings: AnthropicSettings) {
    this.client = new Anthropic({
      apiKey: settings.apiKey,
      ...(settings.baseUrl ? { baseURL: settings.baseUrl } : {}),
      maxRetries: 0,
      timeout: settings.timeoutMs,
    });
  }

  check(p: CompletionParams): void {
    checkAnthropicRequest(p);
  }

  async *stream(p: CompletionParams, signal: AbortSignal): AsyncIterable<CompletionEvent> {
    const call = new UpstreamCall(signal, this.settings.timeoutMs);
    const finished = new Set<number>();
    let promptTokens = 0;
    let completionTokens = 0;
    let stopReason: string | null = null;
    let model: string | undefined;
    try {
      const stream = await this.client.messages.create(toAnthropicRequest(p, this.settings.defaultMaxTokens), {
        signal: call.signal,
      });
      for await (const event of stream) {
        call.touch();
        switch (event.type) {
          case 'message_start':
            model = event.message.model || undefined;
            // Prompt tokens include the prompt cache's reads and writes, all billed as input here.
            promptTokens =
              (event.message.usage.input_tokens ?? 0) +
              (event.message.usage.cache_creation_input_tokens ?? 0) +
              (event.message.usage.cache_read_input_tokens ?? 0);
            completionTokens = event.message.usage.output_tokens ?? 0;
            break;
          case 'content_block_delta':
            if (event.delta.type === 'text_delta' && event.delta.text)
              yield { type: 'delta', index: 0, content: event.delta.text };
            break;
          case 'message_delta':
            // message_delta's usage is cumulative.
            if (event.usage.output_tokens !== null && event.usage.output_tokens !== undefined)
              completionTokens = event.usage.output_tokens;
            if (event.usage.input_tokens !== null && event.usage.input_tokens !== undefined) {
              promptTokens =
                event.usage.input_tokens +
                (event.usage.cache_creation_input_tokens ?? 0) +
                (event.usage.cache_read_input_tokens ?? 0);
            }
            if (event.delta.stop_reason) stopReason = event.delta.stop_reason;
            break;
          case 'message_stop':
            finished.add(0);
            yield { type: 'finish', index: 0, reason: FINISH[stopReason ?? 'end_turn'] ?? 'stop' };
            yield { type: 'usage', prompt_tokens: promptTokens, completion_tokens: completionTokens, model };
            break;
          default:
            break;
        }
      }
      assertComplete(PROVIDER, 1, finished);
      call.complete();
    } catch (err) {
      throw call.failure(err, PROVIDER, classify);
    } finally {
      call.done();
    }
  }

  /** One whole-answer call (stream: false) for a client that does not stream; see Provider.complete. */
  async *complete(p: CompletionParams, signal: AbortSignal): AsyncIterable<CompletionEvent> {
    const message = await wholeAnswer(signal, this.settings.timeoutMs, PROVIDER, classify, (s) =>
      this.client.messages.create(
        { ...toAnthropicRequest(p, this.settings.defaultMaxTokens), stream: false },
        { signal: s },
      ),
    );
    const text = message.content.map((block) => (block.type === 'text' ? block.text : '')).join('');
    if (text) yield { type: 'delta', index: 0, content: text };
    yield { type: 'finish', index: 0, reason: FINISH[message.stop_reason ?? 'end_turn'] ?? 'stop' };
    const u = message.usage;
    // Prompt tokens include the prompt cache's reads and writes, all billed as input here.
    yield {
      type: 'usage',
      prompt_tokens: u.input_tokens + (u.cache_creation_input_tokens ?? 0) + (u.cache_read_input_tokens ?? 0),
      completion_tokens: u.output_tokens,
      model: message.model || undefined,
    };
  }
}
