import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import { postForEvents, postForJson, UpstreamHttpError } from '../sse-request.js';
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
import { checkOpenAIRequest } from './openai.rules.js';

const PROVIDER = 'OpenAI';

const DEFAULT_BASE_URL = 'https://api.openai.com/v1';

function errorMessage(body: unknown, fallback: string): string {
  const message = (body as { error?: { message?: unknown } } | undefined)?.error?.message;
  return typeof message === 'string' ? message : typeof body === 'string' && body ? body.slice(0, 500) : fallback;
}

function classify(err: unknown): ProviderError {
  if (err instanceof UpstreamHttpError) {
    const { status, headers, body } = err.response;
    return httpFailure(PROVIDER, status, errorMessage(body, `HTTP ${status}`), retryAfterMs(headers), err);
  }
  return connectionFailure(PROVIDER, err);
}

/** The upstream request body: every interface field maps one to one. */
export function toOpenAIRequest(p: CompletionParams): ChatCompletionCreateParamsStreaming;
export function toOpenAIRequest(p: CompletionParams, stream: false): ChatCompletionCreateParamsNonStreaming;
export function toOpenAIRequest(
  p: CompletionParams,
  stream = true,
): ChatCompletionCreateParamsStreaming | ChatCompletionCreateParamsNonStreaming {
  const messages = p.messages.map((m) => ({ role: m.role, content: m.content }) as ChatCompletionMessageParam);
  const body: ChatCompletionCreateParamsStreaming | ChatCompletionCreateParamsNonStreaming = stream
    ? // Always: usage is what the account is billed for (a whole answer carries it anyway).
      { model: p.model, messages, stream: true, stream_options: { include_usage: true } }
    : { model: p.model, messages, stream: false };
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
 * OpenAI chat completions, for OpenAI itself and for OpenAI-compatible servers (vLLM, Ollama,
 * llama.cpp) behind OPENAI_BASE_URL: the streaming endpoint over keep-alive HTTP, events read by
 * eventsource-parser (sse-request.ts), typed with the official SDK's own types. No retries here:
 * the worker retries, and only before the first token.
 */
export class OpenAIProvider implements Provider {
  readonly name = 'openai';
  private readonly url: string;
  private readonly headers: Record<string, string>;

  constructor(private readonly settings: UpstreamSettings) {
    this.url = `${(settings.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, '')}/chat/completions`;
    this.headers = { authorization: `Bearer ${settings.apiKey}` };
  }

  check(p: CompletionParams): void {
    checkOpenAIRequest(p);
  }

  async *stream(p: CompletionParams, signal: AbortSignal): AsyncIterable<CompletionEvent> {
    const call = new UpstreamCall(signal, this.settings.timeoutMs);
    const expected = p.n ?? 1;
    const finished = new Set<number>();
    let model: string | undefined;
    try {
      for await (const data of postForEvents(this.url, this.headers, toOpenAIRequest(p), call.signal)) {
        call.touch();
        // Read on to the end of the response (not break): that returns the connection to the pool.
        if (data === '[DONE]') continue;
        const chunk = JSON.parse(data) as ChatCompletionChunk & { error?: { message?: string } };
        // An error in the stream itself (OpenAI-compatible servers send `data: {"error": ...}`).
        if (chunk.error)
          throw new ProviderError(`${PROVIDER} stream failed: ${chunk.error.message ?? 'unknown error'}`, 502, true);
        if (chunk.model) model = chunk.model;
        for (const choice of chunk.choices ?? []) {
          if (choice.delta?.content) yield { type: 'delta', index: choice.index, content: choice.delta.content };
          if (choice.finish_reason) {
            finished.add(choice.index);
            yield { type: 'finish', index: choice.index, reason: choice.finish_reason };
          }
        }
        if (chunk.usage)
          yield {
            type: 'usage',
            prompt_tokens: chunk.usage.prompt_tokens,
            completion_tokens: chunk.usage.completion_tokens,
            model,
          };
      }
      assertComplete(PROVIDER, expected, finished);
      call.complete();
    } catch (err) {
      throw call.failure(err, PROVIDER, classify);
    } finally {
      call.done();
    }
  }

  /** One whole-answer call (stream: false) for a client that does not stream; see Provider.complete. */
  async *complete(p: CompletionParams, signal: AbortSignal): AsyncIterable<CompletionEvent> {
    const answer = (await wholeAnswer(signal, this.settings.timeoutMs, PROVIDER, classify, (s) =>
      postForJson(this.url, this.headers, toOpenAIRequest(p, false), s),
    )) as ChatCompletion & {
      error?: { message?: string };
    };
    // OpenAI-compatible servers may answer 200 with an error body.
    if (answer.error)
      throw new ProviderError(`${PROVIDER} answer failed: ${answer.error.message ?? 'unknown error'}`, 502, true);
    const finished = new Set<number>();
    for (const choice of answer.choices ?? []) {
      const content = choice.message?.content;
      if (content) yield { type: 'delta', index: choice.index, content };
      if (choice.finish_reason) {
        finished.add(choice.index);
        yield { type: 'finish', index: choice.index, reason: choice.finish_reason };
      }
    }
    assertComplete(PROVIDER, p.n ?? 1, finished);
    if (answer.usage)
      yield {
        type: 'usage',
        prompt_tokens: answer.usage.prompt_tokens,
        completion_tokens: answer.usage.completion_tokens,
        model: answer.model || undefined,
      };
  }
}
