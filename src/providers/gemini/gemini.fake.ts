// A fake Gemini API speaking the real wire format: POST /v1beta/models/{model}:streamGenerateContent?alt=sse
// answers SSE events each carrying one GenerateContentResponse (candidates[].content.parts[]: text,
// thought summaries marked `thought`, or a functionCall sent whole,
// finishReason, usageMetadata with cachedContentTokenCount and thoughtsTokenCount when scripted);
// :generateContent answers one JSON body; errors are
// {error:{code, message, status}} with RetryInfo details on 429.
import type { IncomingHttpHeaders } from 'node:http';
import {
  FakeUpstream,
  type ChatRequest,
  type Plan,
  type PlannedCall,
  type WireFormat,
} from '../testing/upstream-fake.js';

export {
  type FakeReply,
  type StreamScript,
  type ErrorReply,
  type RecordedRequest,
  DEFAULT_TOKENS,
} from '../testing/upstream-fake.js';

export const FAKE_GEMINI_KEY = 'fake-gemini-key';

const STATUS: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  429: 'RESOURCE_EXHAUSTED',
  500: 'INTERNAL',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

const ROUTE = /^\/v1(?:beta|alpha)?\/models\/([^/:]+):(streamGenerateContent|generateContent)$/;
const data = (o: unknown) => `data: ${JSON.stringify(o)}\r\n\r\n`;

/**
 * Every event's usageMetadata counts the prompt (cached tokens a part of it, named only on a cache
 * hit); the last one adds the candidates and, for a model that thought, the thoughts beside them.
 */
function usageMetadata(plan: Plan, final: boolean) {
  const prompt = plan.usage?.prompt ?? 0;
  const cached = plan.usage?.cached;
  const promptPart = {
    promptTokenCount: prompt,
    ...(cached !== undefined ? { cachedContentTokenCount: cached } : {}),
  };
  if (!final || !plan.usage) return { ...promptPart, totalTokenCount: prompt };
  const thoughts = plan.usage.thoughts;
  return {
    ...promptPart,
    candidatesTokenCount: plan.usage.completion,
    ...(thoughts !== undefined ? { thoughtsTokenCount: thoughts } : {}),
    totalTokenCount: prompt + plan.usage.completion + (thoughts ?? 0),
  };
}

const functionCall = (c: PlannedCall) => ({
  functionCall: { name: c.name, args: JSON.parse(c.pieces.join('')) as unknown },
});

const response = (plan: Plan, candidates: unknown[], final = false) => ({
  candidates,
  ...(plan.usage ? { usageMetadata: usageMetadata(plan, final) } : {}),
  modelVersion: plan.req.model,
  responseId: 'fake-response-01',
});

export const geminiWire: WireFormat = {
  parse(method, url, body): ChatRequest | undefined {
    const m = ROUTE.exec(url.pathname);
    if (method !== 'POST' || !m) return undefined;
    const g = body?.generationConfig ?? {};
    return {
      model: decodeURIComponent(m[1]!),
      stream: m[2] === 'streamGenerateContent',
      n: g.candidateCount ?? 1,
      maxTokens: g.maxOutputTokens,
      body,
    };
  },
  authorized: (h: IncomingHttpHeaders, url: URL) =>
    h['x-goog-api-key'] === FAKE_GEMINI_KEY || url.searchParams.get('key') === FAKE_GEMINI_KEY,
  errorBody(status, message, type) {
    const error: Record<string, unknown> = {
      code: status,
      message,
      status: type ?? STATUS[status] ?? (status >= 500 ? 'INTERNAL' : 'INVALID_ARGUMENT'),
    };
    if (status === 429) error.details = [{ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: '1s' }];
    return { error };
  },
  finishWord: (f) => (f === 'length' ? 'MAX_TOKENS' : 'STOP'),
  sse: {
    // Thought summaries come first, in parts marked `thought` (Gemini sends them when asked for).
    start: (plan) =>
      plan.thinking === undefined
        ? ''
        : data(
            response(plan, [{ content: { parts: [{ text: plan.thinking, thought: true }], role: 'model' }, index: 0 }]),
          ),
    token: (plan, index, text) => data(response(plan, [{ content: { parts: [{ text }], role: 'model' }, index }])),
    // Gemini sends a function call whole, in one event.
    toolCall: (plan, index, call, _piece, first) => {
      if (!first) return '';
      return data(
        response(plan, [
          { content: { parts: [functionCall(plan.choices[index]!.calls[call]!)], role: 'model' }, index },
        ]),
      );
    },
    // The last event of each candidate carries its finishReason (with an empty text part, as Gemini does).
    finish: (plan, index, reason) =>
      data(
        response(
          plan,
          [{ content: { parts: [{ text: '' }], role: 'model' }, finishReason: reason, index }],
          index === plan.choices.length - 1,
        ),
      ),
    end: () => '',
    error: (_plan, message) => data({ error: { code: 500, message, status: 'INTERNAL' } }),
  },
  complete: (plan, texts, reasons) =>
    response(
      plan,
      texts.map((text, index) => ({
        content: {
          parts: [
            ...(plan.thinking === undefined ? [] : [{ text: plan.thinking, thought: true }]),
            ...(text || plan.choices[index]!.calls.length === 0 ? [{ text }] : []),
            ...plan.choices[index]!.calls.map(functionCall),
          ],
          role: 'model',
        },
        finishReason: reasons[index],
        index,
      })),
      true,
    ),
};

export type FakeGemini = FakeUpstream & { apiKey: string };

/** A fake Gemini API on 127.0.0.1; GEMINI_BASE_URL=fake.url, GEMINI_API_KEY=FAKE_GEMINI_KEY. */
export async function startFakeGemini(): Promise<FakeGemini> {
  const fake = (await new FakeUpstream(geminiWire).listen()) as FakeGemini;
  fake.apiKey = FAKE_GEMINI_KEY;
  return fake;
}
