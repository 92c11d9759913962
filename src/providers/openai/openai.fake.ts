// A fake OpenAI (and OpenAI-compatible) chat completions server speaking the real wire format:
// chat.completion.chunk SSE events ending in `data: [DONE]`, usage (with prompt_tokens_details and
// completion_tokens_details when scripted) in a last chunk with empty choices when
// stream_options.include_usage is set, and {error:{message,type,param,code}} errors.
import type { IncomingHttpHeaders } from 'node:http';
import { FakeUpstream, type ChatRequest, type Plan, type WireFormat } from '../testing/upstream-fake.js';

export {
  type FakeReply,
  type StreamScript,
  type ErrorReply,
  type RecordedRequest,
  DEFAULT_TOKENS,
} from '../testing/upstream-fake.js';

export const FAKE_OPENAI_KEY = 'sk-fake-openai-key';

const ERROR_TYPES: Record<number, [string, string | null]> = {
  400: ['invalid_request_error', null],
  401: ['invalid_request_error', 'invalid_api_key'],
  403: ['invalid_request_error', 'unsupported_country_region_territory'],
  404: ['invalid_request_error', 'model_not_found'],
  429: ['requests', 'rate_limit_exceeded'],
  500: ['server_error', null],
  503: ['server_error', null],
};

const CREATED = 1_767_225_600;
const data = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;

function chunk(plan: Plan, choices: unknown[], usage?: unknown) {
  const includeUsage = plan.req.body?.stream_options?.include_usage === true;
  return {
    id: 'chatcmpl-fake0001',
    object: 'chat.completion.chunk',
    created: CREATED,
    model: plan.req.model,
    system_fingerprint: 'fp_fake',
    choices,
    ...(includeUsage ? { usage: usage ?? null } : {}),
  };
}

/**
 * OpenAI's usage object: reasoning counted inside completion_tokens. OpenAI itself always sends both
 * details objects; a script that names neither cached nor thought tokens gets none, as from a vLLM
 * or Ollama server.
 */
function usageOf(plan: Plan) {
  const u = plan.usage;
  if (!u) return null;
  const completion = u.completion + (u.thoughts ?? 0);
  const details =
    u.cached === undefined && u.thoughts === undefined
      ? {}
      : {
          prompt_tokens_details: { cached_tokens: u.cached ?? 0, audio_tokens: 0 },
          completion_tokens_details: {
            reasoning_tokens: u.thoughts ?? 0,
            audio_tokens: 0,
            accepted_prediction_tokens: 0,
            rejected_prediction_tokens: 0,
          },
        };
  return { prompt_tokens: u.prompt, completion_tokens: completion, total_tokens: u.prompt + completion, ...details };
}

export const openaiWire: WireFormat = {
  parse(method, url, body): ChatRequest | undefined {
    if (method !== 'POST' || !url.pathname.endsWith('/chat/completions')) return undefined;
    return {
      model: String(body?.model ?? ''),
      stream: body?.stream === true,
      n: body?.n ?? 1,
      maxTokens: body?.max_completion_tokens ?? body?.max_tokens ?? undefined,
      body,
    };
  },
  authorized: (headers: IncomingHttpHeaders) => headers.authorization === `Bearer ${FAKE_OPENAI_KEY}`,
  errorBody(status, message, type) {
    const [t, code] = ERROR_TYPES[status] ?? (status >= 500 ? ['server_error', null] : ['invalid_request_error', null]);
    return { error: { message, type: type ?? t, param: null, code } };
  },
  finishWord: (f) => f,
  sse: {
    start: (plan) =>
      plan.choices
        .map((c) =>
          data(
            chunk(plan, [
              {
                index: c.index,
                delta: { role: 'assistant', content: '', refusal: null },
                logprobs: null,
                finish_reason: null,
              },
            ]),
          ),
        )
        .join(''),
    token: (plan, index, text) =>
      data(chunk(plan, [{ index, delta: { content: text }, logprobs: null, finish_reason: null }])),
    toolCall(plan, index, call, piece, first) {
      const c = plan.choices[index]!.calls[call]!;
      const delta = first
        ? { index: call, id: c.id, type: 'function', function: { name: c.name, arguments: piece } }
        : { index: call, function: { arguments: piece } };
      return data(chunk(plan, [{ index, delta: { tool_calls: [delta] }, logprobs: null, finish_reason: null }]));
    },
    finish: (plan, index, reason) => data(chunk(plan, [{ index, delta: {}, logprobs: null, finish_reason: reason }])),
    end(plan) {
      const includeUsage = plan.req.body?.stream_options?.include_usage === true;
      return `${includeUsage && plan.usage ? data(chunk(plan, [], usageOf(plan))) : ''}data: [DONE]\n\n`;
    },
    error: (_plan, message) => data({ error: { message, type: 'server_error', param: null, code: null } }),
  },
  complete: (plan, texts, reasons) => ({
    id: 'chatcmpl-fake0001',
    object: 'chat.completion',
    created: CREATED,
    model: plan.req.model,
    system_fingerprint: 'fp_fake',
    choices: texts.map((content, index) => ({
      index,
      message: {
        role: 'assistant',
        content: content === '' && plan.choices[index]!.calls.length > 0 ? null : content,
        refusal: null,
        ...(plan.choices[index]!.calls.length > 0
          ? {
              tool_calls: plan.choices[index]!.calls.map((c) => ({
                id: c.id,
                type: 'function',
                function: { name: c.name, arguments: c.pieces.join('') },
              })),
            }
          : {}),
      },
      logprobs: null,
      finish_reason: reasons[index],
    })),
    ...(plan.usage ? { usage: usageOf(plan) } : {}),
  }),
};

export type FakeOpenAI = FakeUpstream & { apiKey: string };

/** A fake OpenAI on 127.0.0.1; point the SDK at `${fake.url}/v1` with apiKey FAKE_OPENAI_KEY. */
export async function startFakeOpenAI(): Promise<FakeOpenAI> {
  const fake = (await new FakeUpstream(openaiWire).listen()) as FakeOpenAI;
  fake.apiKey = FAKE_OPENAI_KEY;
  return fake;
}
