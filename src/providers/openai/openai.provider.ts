import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParamsNonStreaming,
  ChatCompletionCreateParamsStreaming,
  ChatCompletionMessageParam,
} from 'openai/resources/chat/completions';
import type { CompletionUsage } from 'openai/resources/completions';
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
import { ProviderError, type ChatMessage, type UpstreamEvent, type CompletionParams, type Provider } from '../types.js';
import { checkOpenAIRequest } from './openai.rules.js';

/** Which OpenAI-compatible provider an instance serves: from its plug-in (openai-compatible.plugin.ts). */
export interface OpenAICompatibleIdentity {
  /** The plug-in's name: the catalog's `provider`. */
  name: string;
  /** How error messages name it. */
  label: string;
  /** Its API's base URL (ending in /v1) when the settings give none. */
  defaultBaseUrl: string;
}

function errorMessage(body: unknown, fallback: string): string {
  const message = (body as { error?: { message?: unknown } } | undefined)?.error?.message;
  return typeof message === 'string' ? message : typeof body === 'string' && body ? body.slice(0, 500) : fallback;
}

function classify(label: string, err: unknown): ProviderError {
  if (err instanceof UpstreamHttpError) {
    const { status, headers, body } = err.response;
    return httpFailure(label, status, errorMessage(body, `HTTP ${status}`), retryAfterMs(headers), err);
  }
  return connectionFailure(label, err);
}

/**
 * The message as OpenAI takes it: the client's own fields, passed through, but for cache_control
 * marks (Anthropic's, which OpenAI refuses as unknown fields: it caches prefixes on its own).
 */
function toOpenAIMessage(m: ChatMessage): ChatCompletionMessageParam {
  const content = Array.isArray(m.content) ? m.content.map(withoutCacheControl) : m.content;
  const out: Record<string, unknown> = { role: m.role, content };
  if (m.name !== undefined) out.name = m.name;
  if (m.tool_calls !== undefined) out.tool_calls = m.tool_calls;
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  return out as unknown as ChatCompletionMessageParam;
}

const withoutCacheControl = <T extends { cache_control?: unknown }>({ cache_control: _, ...rest }: T) => rest;

/** The upstream request body: every field maps one to one (tools and structured output passed through). */
export function toOpenAIRequest(p: CompletionParams): ChatCompletionCreateParamsStreaming;
export function toOpenAIRequest(p: CompletionParams, stream: false): ChatCompletionCreateParamsNonStreaming;
export function toOpenAIRequest(
  p: CompletionParams,
  stream = true,
): ChatCompletionCreateParamsStreaming | ChatCompletionCreateParamsNonStreaming {
  const messages = p.messages.map(toOpenAIMessage);
  const body: ChatCompletionCreateParamsStreaming | ChatCompletionCreateParamsNonStreaming = stream
    ? // Always: usage is what the account is billed for (a whole answer carries it anyway).
      { model: p.model, messages, stream: true, stream_options: { include_usage: true } }
    : { model: p.model, messages, stream: false };
  if (p.temperature !== undefined) body.temperature = p.temperature;
  if (p.top_p !== undefined) body.top_p = p.top_p;
  // max_tokens rather than max_completion_tokens: vLLM, Ollama and llama.cpp servers all read it.
  // OpenAI's reasoning models refuse max_tokens, though: a request with an effort (sent only to a
  // model the catalog marks as reasoning) bounds reasoning and answer with max_completion_tokens.
  if (p.max_tokens !== undefined && p.reasoning_effort !== undefined) body.max_completion_tokens = p.max_tokens;
  else if (p.max_tokens !== undefined) body.max_tokens = p.max_tokens;
  if (p.n !== undefined) body.n = p.n;
  if (p.stop !== undefined) body.stop = p.stop;
  if (p.presence_penalty !== undefined) body.presence_penalty = p.presence_penalty;
  if (p.frequency_penalty !== undefined) body.frequency_penalty = p.frequency_penalty;
  if (p.logit_bias !== undefined) body.logit_bias = p.logit_bias;
  if (p.user !== undefined) body.user = p.user;
  if (p.seed !== undefined) body.seed = p.seed;
  if (p.tools !== undefined) body.tools = p.tools.map(withoutCacheControl);
  if (p.tool_choice !== undefined) body.tool_choice = p.tool_choice;
  if (p.parallel_tool_calls !== undefined) body.parallel_tool_calls = p.parallel_tool_calls;
  if (p.response_format !== undefined) body.response_format = p.response_format;
  if (p.reasoning_effort !== undefined) body.reasoning_effort = p.reasoning_effort;
  return body;
}

/** The events of one message's (or delta's) tool calls; `call` is the call's index within the choice. */
function* toolCallEvents(
  index: number,
  calls: readonly { index?: number; id?: string; function?: { name?: string; arguments?: string } }[] | undefined,
): Generator<UpstreamEvent> {
  for (let i = 0; i < (calls?.length ?? 0); i++) {
    const c = calls![i]!;
    const ev: UpstreamEvent = {
      type: 'tool_call',
      index,
      call: c.index ?? i,
      arguments: c.function?.arguments ?? '',
    };
    if (c.id) ev.id = c.id;
    if (c.function?.name) ev.name = c.function.name;
    yield ev;
  }
}

/**
 * OpenAI's usage as the ledger takes it. Its prompt and completion counts already include the
 * cached and reasoning tokens; OpenAI-compatible servers that send no details report none.
 */
function usageEvent(usage: CompletionUsage, model: string | undefined): UpstreamEvent {
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  const reasoning = usage.completion_tokens_details?.reasoning_tokens ?? 0;
  return {
    type: 'usage',
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    ...(cached > 0 ? { cached_tokens: cached } : {}),
    ...(reasoning > 0 ? { reasoning_tokens: reasoning } : {}),
    model,
  };
}

/**
 * OpenAI chat completions, for OpenAI itself and for every OpenAI-compatible provider (a plug-in
 * of its own, or a vLLM, Ollama or llama.cpp server behind OPENAI_BASE_URL): the streaming
 * endpoint over keep-alive HTTP, events read by eventsource-parser (sse-request.ts), typed with
 * the official SDK's own types. Its name, label and default URL are its plug-in's. No retries
 * here: the worker retries, and only before the first token.
 */
export class OpenAIProvider implements Provider {
  readonly name: string;
  private readonly label: string;
  private readonly url: string;
  private readonly headers: Record<string, string>;
  private readonly classify: (err: unknown) => ProviderError;

  constructor(
    private readonly settings: UpstreamSettings,
    identity: OpenAICompatibleIdentity,
  ) {
    this.name = identity.name;
    this.label = identity.label;
    this.url = `${(settings.baseUrl ?? identity.defaultBaseUrl).replace(/\/+$/, '')}/chat/completions`;
    this.headers = { authorization: `Bearer ${settings.apiKey}` };
    this.classify = (err) => classify(this.label, err);
  }

  check(p: CompletionParams): void {
    checkOpenAIRequest(p);
  }

  async *stream(p: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent> {
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
          throw new ProviderError(`${this.label} stream failed: ${chunk.error.message ?? 'unknown error'}`, 502, true);
        if (chunk.model) model = chunk.model;
        for (const choice of chunk.choices ?? []) {
          if (choice.delta?.content) yield { type: 'delta', index: choice.index, content: choice.delta.content };
          // Most chunks carry text only: no generator for tool calls they do not have.
          if (choice.delta?.tool_calls) yield* toolCallEvents(choice.index, choice.delta.tool_calls);
          if (choice.finish_reason) {
            finished.add(choice.index);
            yield { type: 'finish', index: choice.index, reason: choice.finish_reason };
          }
        }
        if (chunk.usage) yield usageEvent(chunk.usage, model);
      }
      assertComplete(this.label, expected, finished);
      call.complete();
    } catch (err) {
      throw call.failure(err, this.label, this.classify);
    } finally {
      call.done();
    }
  }

  /** One whole-answer call (stream: false) for a client that does not stream; see Provider.complete. */
  async *complete(p: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent> {
    const answer = (await wholeAnswer(signal, this.settings.timeoutMs, this.label, this.classify, (s) =>
      postForJson(this.url, this.headers, toOpenAIRequest(p, false), s),
    )) as ChatCompletion & {
      error?: { message?: string };
    };
    // OpenAI-compatible servers may answer 200 with an error body.
    if (answer.error)
      throw new ProviderError(`${this.label} answer failed: ${answer.error.message ?? 'unknown error'}`, 502, true);
    const finished = new Set<number>();
    for (const choice of answer.choices ?? []) {
      const content = choice.message?.content;
      if (content) yield { type: 'delta', index: choice.index, content };
      yield* toolCallEvents(
        choice.index,
        choice.message?.tool_calls?.flatMap((c) => (c.type === 'function' ? [{ id: c.id, function: c.function }] : [])),
      );
      if (choice.finish_reason) {
        finished.add(choice.index);
        yield { type: 'finish', index: choice.index, reason: choice.finish_reason };
      }
    }
    assertComplete(this.label, p.n ?? 1, finished);
    if (answer.usage) yield usageEvent(answer.usage, answer.model || undefined);
  }
}
