import { randomBytes } from 'node:crypto';
import { EventSourceParserStream } from 'eventsource-parser/stream';
import {
  assertComplete,
  connectionFailure,
  httpFailure,
  retryAfterMs,
  UpstreamCall,
  wholeAnswer,
  type UpstreamSettings,
} from '../upstream.js';
import {
  ProviderError,
  type ChatMessage,
  type UpstreamEvent,
  type CompletionParams,
  type JsonSchemaObject,
  type Provider,
} from '../types.js';
import { checkGeminiRequest } from './gemini.rules.js';
import { thinkingConfigOf } from './gemini-thinking.js';
import { parseDataUrl, textOf } from '../messages.js';

// The Gemini API over fetch and eventsource-parser rather than @google/genai: the SDK's ApiError
// drops the response headers and Google's RetryInfo, which the worker needs to back off well,
// and the wire protocol (one GenerateContentResponse per SSE event) is small and stable.

const PROVIDER = 'Gemini';
const DEFAULT_BASE = 'https://generativelanguage.googleapis.com';

/** Gemini's finish reasons in OpenAI's words; the safety family is a content filter. */
const FINISH: Record<string, string> = {
  STOP: 'stop',
  MAX_TOKENS: 'length',
  SAFETY: 'content_filter',
  RECITATION: 'content_filter',
  BLOCKLIST: 'content_filter',
  PROHIBITED_CONTENT: 'content_filter',
  SPII: 'content_filter',
  IMAGE_SAFETY: 'content_filter',
};

type Part = Record<string, unknown>;

export interface GeminiRequest {
  contents: { role: 'user' | 'model'; parts: Part[] }[];
  systemInstruction?: { parts: { text: string }[] };
  tools?: { functionDeclarations: Part[] }[];
  toolConfig?: { functionCallingConfig: { mode: 'AUTO' | 'ANY' | 'NONE'; allowedFunctionNames?: string[] } };
  generationConfig: {
    seed?: number;
    responseMimeType?: string;
    responseJsonSchema?: JsonSchemaObject;
    temperature?: number;
    topP?: number;
    maxOutputTokens?: number;
    stopSequences?: string[];
    candidateCount?: number;
    presencePenalty?: number;
    frequencyPenalty?: number;
    /** Without includeThoughts: the thinking is not sent back, only counted (thoughtsTokenCount). */
    thinkingConfig?: { thinkingBudget: number };
  };
}

interface GeminiChunk {
  candidates?: {
    index?: number;
    content?: {
      parts?: { text?: string; thought?: boolean; functionCall?: { id?: string; name?: string; args?: unknown } }[];
    };
    finishReason?: string;
  }[];
  promptFeedback?: { blockReason?: string };
  usageMetadata?: {
    promptTokenCount?: number;
    /** Of promptTokenCount, those read from the (implicit or explicit) context cache. */
    cachedContentTokenCount?: number;
    candidatesTokenCount?: number;
    /** Beside candidatesTokenCount, not within it. */
    thoughtsTokenCount?: number;
  };
  /** The model that answered. */
  modelVersion?: string;
  error?: GeminiErrorBody['error'];
}

interface GeminiErrorBody {
  error?: { code?: number; message?: string; status?: string; details?: { '@type'?: string; retryDelay?: string }[] };
}

function userParts(content: ChatMessage['content']): Part[] {
  if (content === null || typeof content === 'string') return [{ text: content ?? '' }];
  return content.map((part) => {
    if (part.type === 'text') return { text: part.text };
    // The rules let only data URLs through.
    const data = parseDataUrl(part.image_url.url)!;
    return { inlineData: { mimeType: data.mediaType, data: data.data } };
  });
}

/** user and model turns; tool results become functionResponse parts of one user turn, named after their call. */
function toContents(messages: readonly ChatMessage[]): GeminiRequest['contents'] {
  const names = new Map<string, string>();
  const out: GeminiRequest['contents'] = [];
  for (const m of messages) {
    if (m.role === 'user') out.push({ role: 'user', parts: userParts(m.content) });
    else if (m.role === 'assistant') {
      const text = textOf(m.content);
      const calls = (m.tool_calls ?? []).map((c) => {
        names.set(c.id, c.function.name);
        const args: unknown = c.function.arguments.trim() === '' ? {} : JSON.parse(c.function.arguments);
        return { functionCall: { name: c.function.name, args } };
      });
      out.push({ role: 'model', parts: [...(text || calls.length === 0 ? [{ text }] : []), ...calls] });
    } else if (m.role === 'tool') {
      const id = m.tool_call_id ?? '';
      const part = { functionResponse: { name: names.get(id) ?? id, response: { output: textOf(m.content) } } };
      const last = out[out.length - 1];
      if (last?.role === 'user' && last.parts.every((p) => 'functionResponse' in p)) last.parts.push(part);
      else out.push({ role: 'user', parts: [part] });
    }
  }
  return out;
}

/** tools as functionDeclarations (their JSON Schemas as they are), tool_choice as the function calling mode. */
function toolsOf(p: CompletionParams): Pick<GeminiRequest, 'tools' | 'toolConfig'> {
  if (!p.tools) return {};
  const functionDeclarations = p.tools.map((t) => ({
    name: t.function.name,
    ...(t.function.description ? { description: t.function.description } : {}),
    ...(t.function.parameters ? { parametersJsonSchema: t.function.parameters } : {}),
  }));
  const choice = p.tool_choice ?? 'auto';
  const functionCallingConfig: NonNullable<GeminiRequest['toolConfig']>['functionCallingConfig'] =
    typeof choice === 'object'
      ? { mode: 'ANY', allowedFunctionNames: [choice.function.name] }
      : { mode: choice === 'required' ? 'ANY' : choice === 'none' ? 'NONE' : 'AUTO' };
  return { tools: [{ functionDeclarations }], toolConfig: { functionCallingConfig } };
}

/**
 * The generateContent body: system (and developer) messages become systemInstruction, assistant
 * becomes "model", tool calls and results functionCall and functionResponse parts, images inline
 * data, response_format the response MIME type and JSON Schema, reasoning_effort a thinking budget
 * (gemini-thinking.ts).
 */
export function toGeminiRequest(p: CompletionParams): GeminiRequest {
  const system = p.messages
    .filter((m) => m.role === 'system' || m.role === 'developer')
    .map((m) => ({ text: textOf(m.content) }));
  const body: GeminiRequest = { contents: toContents(p.messages), ...toolsOf(p), generationConfig: {} };
  if (system.length) body.systemInstruction = { parts: system };
  const g = body.generationConfig;
  if (p.temperature !== undefined) g.temperature = p.temperature;
  if (p.top_p !== undefined) g.topP = p.top_p;
  if (p.max_tokens !== undefined) g.maxOutputTokens = p.max_tokens;
  if (p.stop?.length) g.stopSequences = p.stop;
  if (p.n !== undefined) g.candidateCount = p.n;
  if (p.presence_penalty !== undefined) g.presencePenalty = p.presence_penalty;
  if (p.frequency_penalty !== undefined) g.frequencyPenalty = p.frequency_penalty;
  if (p.seed !== undefined) g.seed = p.seed;
  const thinking = thinkingConfigOf(p.model, p.reasoning_effort);
  if (thinking) g.thinkingConfig = thinking;
  if (p.response_format) {
    g.responseMimeType = 'application/json';
    if (p.response_format.type === 'json_schema' && p.response_format.json_schema.schema)
      g.responseJsonSchema = p.response_format.json_schema.schema;
  }
  return body;
}

/** Google's RetryInfo detail ("2s", "0.5s") when the 429 carries no Retry-After header. */
function retryDelayMs(body: GeminiErrorBody | undefined): number | undefined {
  const delay = body?.error?.details?.find((d) => d['@type']?.endsWith('google.rpc.RetryInfo'))?.retryDelay;
  const m = delay === undefined ? null : /^(\d+(?:\.\d+)?)s$/.exec(delay);
  return m ? Math.ceil(Number(m[1]) * 1000) : undefined;
}

/** The API root with its version, from GEMINI_BASE_URL (a host root like the SDK's baseUrl, or one ending in /v1beta). */
export function geminiRoot(baseUrl: string | undefined): string {
  const base = (baseUrl ?? DEFAULT_BASE).replace(/\/+$/, '');
  return /\/v1(alpha|beta)?$/.test(base) ? base : `${base}/v1beta`;
}

function classify(e: unknown): ProviderError {
  return e instanceof SyntaxError
    ? new ProviderError(`${PROVIDER} sent malformed JSON: ${e.message}`, 502, true, undefined, { cause: e })
    : connectionFailure(PROVIDER, e);
}

/** What reading one answer keeps across its chunks. */
interface AnswerState {
  /** Choices whose finish was reported. */
  finished: Set<number>;
  /** Function calls made so far, by choice. */
  calls: Map<number, number>;
  /** parallel_tool_calls false: the API has no such switch, so calls after a choice's first are dropped. */
  single: boolean;
}

const newState = (p: CompletionParams): AnswerState => ({
  finished: new Set(),
  calls: new Map(),
  single: p.parallel_tool_calls === false,
});

/**
 * The events in one response (a streamed chunk, or the whole answer: they share a shape). An
 * error inside it is thrown; a choice's finish is reported once, recorded in `state.finished`.
 * Gemini sends a function call whole and names no id: each gets one.
 */
function* eventsOf(chunk: GeminiChunk, expected: number, state: AnswerState): Generator<UpstreamEvent> {
  const { finished } = state;
  if (chunk.error) {
    const status = chunk.error.code ?? 500;
    throw httpFailure(PROVIDER, status, chunk.error.message ?? 'stream error', retryDelayMs({ error: chunk.error }));
  }
  for (const c of chunk.candidates ?? []) {
    const index = c.index ?? 0;
    // Thought summaries (only sent when asked for) are not part of the answer.
    const text = (c.content?.parts ?? [])
      .filter((part) => !part.thought && part.text)
      .map((part) => part.text)
      .join('');
    if (text) yield { type: 'delta', index, content: text };
    for (const part of c.content?.parts ?? []) {
      if (!part.functionCall) continue;
      const call = state.calls.get(index) ?? 0;
      if (state.single && call > 0) continue;
      state.calls.set(index, call + 1);
      const id = part.functionCall.id ?? `call_${randomBytes(12).toString('hex')}`;
      const args = JSON.stringify(part.functionCall.args ?? {});
      yield { type: 'tool_call', index, call, id, name: part.functionCall.name ?? '', arguments: args };
    }
    if (c.finishReason && !finished.has(index)) {
      finished.add(index);
      // Gemini says STOP after function calls; OpenAI's clients expect tool_calls.
      const reason = c.finishReason === 'STOP' && state.calls.has(index) ? 'tool_calls' : FINISH[c.finishReason];
      yield { type: 'finish', index, reason: reason ?? 'stop' };
    }
  }
  // A blocked prompt comes back with no candidates at all.
  if (chunk.promptFeedback?.blockReason && !chunk.candidates?.length) {
    for (let i = 0; i < expected; i++) {
      if (!finished.has(i)) {
        finished.add(i);
        yield { type: 'finish', index: i, reason: 'content_filter' };
      }
    }
  }
}

/**
 * Gemini's counts in OpenAI's meaning: cached tokens are already part of the prompt count, and
 * thinking tokens, which Google counts beside the answer's and bills as output, are added to the
 * completion and reported as its reasoning part.
 */
function usageEvent(usage: NonNullable<GeminiChunk['usageMetadata']>, model: string | undefined): UpstreamEvent {
  const cached = usage.cachedContentTokenCount ?? 0;
  const thoughts = usage.thoughtsTokenCount ?? 0;
  return {
    type: 'usage',
    prompt_tokens: usage.promptTokenCount ?? 0,
    completion_tokens: (usage.candidatesTokenCount ?? 0) + thoughts,
    ...(cached > 0 ? { cached_tokens: cached } : {}),
    ...(thoughts > 0 ? { reasoning_tokens: thoughts } : {}),
    model: model || undefined,
  };
}

/**
 * The Gemini API's streamGenerateContent (alt=sse), or generateContent for a client that does
 * not stream. user is not sent (the API has no such field);
 * logit_bias cannot be honoured. Completion tokens include the model's thinking tokens, which
 * Google bills as output.
 */
export class GeminiProvider implements Provider {
  readonly name = 'gemini';
  private readonly root: string;

  constructor(private readonly settings: UpstreamSettings) {
    this.root = geminiRoot(settings.baseUrl);
  }

  check(p: CompletionParams): void {
    checkGeminiRequest(p);
  }

  private url(model: string, stream: boolean): string {
    const path = /^(models|tunedModels)\//.test(model) ? model : `models/${model}`;
    return stream ? `${this.root}/${path}:streamGenerateContent?alt=sse` : `${this.root}/${path}:generateContent`;
  }

  /** POSTs the request; a non-2xx answer becomes the ProviderError its status calls for. */
  private async post(p: CompletionParams, stream: boolean, signal: AbortSignal): Promise<Response> {
    const res = await fetch(this.url(p.model, stream), {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: stream ? 'text/event-stream' : 'application/json',
        'x-goog-api-key': this.settings.apiKey,
      },
      body: JSON.stringify(toGeminiRequest(p)),
      signal,
    });
    if (!res.ok) {
      const text = await res.text();
      let body: GeminiErrorBody | undefined;
      try {
        body = JSON.parse(text) as GeminiErrorBody;
      } catch {
        body = undefined;
      }
      const message = body?.error?.message ?? (text.slice(0, 500) || res.statusText);
      throw httpFailure(PROVIDER, res.status, message, retryAfterMs(res.headers) ?? retryDelayMs(body));
    }
    return res;
  }

  async *stream(p: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent> {
    const call = new UpstreamCall(signal, this.settings.timeoutMs);
    const expected = p.n ?? 1;
    const state = newState(p);
    let usage: GeminiChunk['usageMetadata'];
    let model: string | undefined;
    try {
      const res = await this.post(p, true, call.signal);
      call.touch();
      if (!res.body) throw new ProviderError(`${PROVIDER} answered without a body`, 502, true);

      const events = res.body.pipeThrough(new TextDecoderStream()).pipeThrough(new EventSourceParserStream());
      for await (const event of events) {
        call.touch();
        const chunk = JSON.parse(event.data) as GeminiChunk;
        yield* eventsOf(chunk, expected, state);
        if (chunk.usageMetadata) usage = chunk.usageMetadata;
        if (chunk.modelVersion) model = chunk.modelVersion;
      }
      assertComplete(PROVIDER, expected, state.finished);
      call.complete();
      if (usage) yield usageEvent(usage, model);
    } catch (err) {
      throw call.failure(err, PROVIDER, classify);
    } finally {
      call.done();
    }
  }

  /** One whole-answer call (:generateContent) for a client that does not stream; see Provider.complete. */
  async *complete(p: CompletionParams, signal: AbortSignal): AsyncIterable<UpstreamEvent> {
    const answer = await wholeAnswer(
      signal,
      this.settings.timeoutMs,
      PROVIDER,
      classify,
      async (s) => (await (await this.post(p, false, s)).json()) as GeminiChunk,
    );
    const expected = p.n ?? 1;
    const state = newState(p);
    yield* eventsOf(answer, expected, state);
    assertComplete(PROVIDER, expected, state.finished);
    if (answer.usageMetadata) yield usageEvent(answer.usageMetadata, answer.modelVersion);
  }
}
