import OpenAI from 'openai';
import type { ChatCompletionCreateParamsStreaming, ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { assertComplete, checkRoles, connectionFailure, httpFailure, retryAfterMs, unsupported, UpstreamCall, type UpstreamSettings } from './upstream.js';
import { ProviderError, type CompletionEvent, type CompletionParams, type Provider } from './types.js';

const PROVIDER = 'OpenAI';
const ROLES = ['system', 'developer', 'user', 'assistant'] as const;

function classify(err: unknown): ProviderError {
  if (err instanceof OpenAI.APIError && typeof err.status === 'number') {
    const body = err.error as { message?: unknown } | undefined;
    const message = typeof body?.message === 'string' ? body.message : err.message;
    return httpFailure(PROVIDER, err.status, message, retryAfterMs(err.headers), err);
  }
  // A mid-stream `data: {"error": ...}` arrives as an APIError without a status.
  if (err instanceof OpenAI.APIError && !(err instanceof OpenAI.APIConnectionError)) {
    return new ProviderError(`${PROVIDER} stream failed: ${err.message}`, 502, true, undefined, { cause: err });
  }
  return connectionFailure(PROVIDER, err);
}

/** The upstream request body: every interface field maps one to one. */
export function toOpenAIRequest(p: CompletionParams): ChatCompletionCreateParamsStreaming {
  const body: ChatCompletionCreateParamsStreaming = {
    model: p.model,
    messages: p.messages.map((m) => ({ role: m.role, content: m.content }) as ChatCompletionMessageParam),
    stream: true,
    // Always: usage is what the account is billed for.
    stream_options: { include_usage: true },
  };
  if (p.temperature !== undefined) body.temperature = p.temperature;
  if (p.top_p !== undefined) body.top_p = p.top_p;
  // max_tokens rather than max_completion_tokens: vLLM, Ollama and llama.cpp servers all read it.
  if (p.max_tokens !== undefined) body.max_tokens = p.max_tokens;
  if (p.n !== undefined) body.n = p.n;
  if (p.stop !== undefined) body.stop = p.stop;
  if (p.presence_penalty !== undefined) body.presence_penalty = p.presence_penalty;
  if (p.frequency_penalty !== undefined) body.frequency_penalty = p.frequency_penalty;
  if (p.logit_bias !== undefined) body.logit_bias = p.logit_bias;
  if (p.user !== undefined) body.user = p.user;
  return body;
}

/**
 * OpenAI chat completions through the official SDK, for OpenAI itself and for OpenAI-compatible
 * servers (vLLM, Ollama, llama.cpp) behind OPENAI_BASE_URL. SDK retries are off: the worker
 * retries, and only before the first token.
 */
export class OpenAIProvider implements Provider {
  readonly name = 'openai';
  private readonly client: OpenAI;

  constructor(private readonly settings: UpstreamSettings) {
    this.client = new OpenAI({
      apiKey: settings.apiKey,
      ...(settings.baseUrl ? { baseURL: settings.baseUrl } : {}),
      maxRetries: 0,
      timeout: settings.timeoutMs,
    });
  }

  check(p: CompletionParams): void {
    checkRoles(p.messages, ROLES, PROVIDER);
    // OpenAI's own rule for logit_bias: token ids as keys, biases from -100 to 100.
    for (const [token, bias] of Object.entries(p.logit_bias ?? {})) {
      if (!/^\d+$/.test(token)) throw unsupported('logit_bias', `logit_bias keys must be token ids (integers); got "${token}"`, ['logit_bias', token]);
      if (bias < -100 || bias > 100) throw unsupported('logit_bias', `logit_bias values must be from -100 to 100; got ${bias} for token ${token}`, ['logit_bias', token]);
    }
  }

  async *stream(p: CompletionParams, signal: AbortSignal): AsyncIterable<CompletionEvent> {
    const call = new UpstreamCall(signal, this.settings.timeoutMs);
    const expected = p.n ?? 1;
    const finished = new Set<number>();
    try {
      const stream = await this.client.chat.completions.create(toOpenAIRequest(p), { signal: call.signal });
      for await (const chunk of stream) {
        call.touch();
        for (const choice of chunk.choices ?? []) {
          if (choice.delta?.content) yield { type: 'delta', index: choice.index, content: choice.delta.content };
          if (choice.finish_reason) {
            finished.add(choice.index);
            yield { type: 'finish', index: choice.index, reason: choice.finish_reason };
          }
        }
        if (chunk.usage) yield { type: 'usage', prompt_tokens: chunk.usage.prompt_tokens, completion_tokens: chunk.usage.completion_tokens };
      }
      assertComplete(PROVIDER, expected, finished);
    } catch (err) {
      throw call.failure(err, PROVIDER, classify);
    } finally {
      call.done();
    }
  }
}
