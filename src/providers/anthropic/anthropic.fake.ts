// A fake Anthropic Messages API speaking the real wire format: named SSE events message_start,
// content_block_start, ping, content_block_delta (thinking_delta and signature_delta of a thinking
// block, text_delta, input_json_delta of a tool_use block),
// content_block_stop, message_delta
// (stop_reason, cumulative usage) and message_stop; `event: error` in-stream; errors as
// {type:'error', error:{type, message}} with a request-id header. Usage carries the prompt cache's
// reads and writes (by TTL) and the thinking tokens as the API counts them (StreamScript.usage).
import type { IncomingHttpHeaders } from 'node:http';
import { FakeUpstream, type ChatRequest, type Plan, type WireFormat } from '../testing/upstream-fake.js';

export {
  type FakeReply,
  type StreamScript,
  type ErrorReply,
  type RecordedRequest,
  DEFAULT_TOKENS,
} from '../testing/upstream-fake.js';

export const FAKE_ANTHROPIC_KEY = 'sk-ant-fake-key';

const ERROR_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  529: 'overloaded_error',
};

const event = (name: string, o: unknown) => `event: ${name}\ndata: ${JSON.stringify(o)}\n\n`;
const MESSAGE_ID = 'msg_fake01';
const SIGNATURE = 'fake-signature';

/** The index of the text block: after the thinking block when the model thinks. */
const textBlock = (plan: Plan) => (plan.thinking === undefined ? 0 : 1);

/** A thinking block whole, as the API streams it: its text, then its signature. */
const thinkingEvents = (thinking: string) =>
  event('content_block_start', {
    type: 'content_block_start',
    index: 0,
    content_block: { type: 'thinking', thinking: '', signature: '' },
  }) +
  event('content_block_delta', { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking } }) +
  event('content_block_delta', {
    type: 'content_block_delta',
    index: 0,
    delta: { type: 'signature_delta', signature: SIGNATURE },
  }) +
  event('content_block_stop', { type: 'content_block_stop', index: 0 });

/**
 * The usage object of a stream's message_start, of its message_delta (cumulative) and of a whole
 * message. input_tokens is the prompt less the cache's reads and writes; output_tokens counts the
 * thinking too, known at the end only: message_start says 1. Only message_start and a whole
 * message break the writes down by TTL (cache_creation), as the API does.
 */
function usage(plan: Plan, at: 'start' | 'delta' | 'whole') {
  const u = plan.usage;
  const read = u?.cached ?? 0;
  const write5m = u?.cacheWrite5m ?? 0;
  const write1h = u?.cacheWrite1h ?? 0;
  const counts = {
    input_tokens: (u?.prompt ?? 0) - read - write5m - write1h,
    cache_creation_input_tokens: write5m + write1h,
    cache_read_input_tokens: read,
  };
  const byTtl = { cache_creation: { ephemeral_5m_input_tokens: write5m, ephemeral_1h_input_tokens: write1h } };
  if (at === 'start') return { ...counts, ...byTtl, output_tokens: 1, output_tokens_details: null };
  const output = {
    output_tokens: (u?.completion ?? 0) + (u?.thoughts ?? 0),
    output_tokens_details: u?.thoughts === undefined ? null : { thinking_tokens: u.thoughts },
  };
  return at === 'delta' ? { ...counts, ...output } : { ...counts, ...byTtl, ...output };
}

export const anthropicWire: WireFormat = {
  parse(method, url, body): ChatRequest | undefined {
    if (method !== 'POST' || url.pathname !== '/v1/messages') return undefined;
    // The Messages API has no n: always one answer.
    return { model: String(body?.model ?? ''), stream: body?.stream === true, n: 1, maxTokens: body?.max_tokens, body };
  },
  // SDK 1.x sends the key as a bearer token; older clients send x-api-key. Both are accepted upstream.
  authorized: (h: IncomingHttpHeaders) =>
    typeof h['anthropic-version'] === 'string' &&
    (h['x-api-key'] === FAKE_ANTHROPIC_KEY || h.authorization === `Bearer ${FAKE_ANTHROPIC_KEY}`),
  errorBody: (status, message, type) => ({
    type: 'error',
    error: { type: type ?? ERROR_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error'), message },
    request_id: 'req_fake01',
  }),
  finishWord: (f) => (f === 'length' ? 'max_tokens' : f === 'tool_calls' ? 'tool_use' : 'end_turn'),
  sse: {
    start: (plan) =>
      event('message_start', {
        type: 'message_start',
        message: {
          id: MESSAGE_ID,
          type: 'message',
          role: 'assistant',
          content: [],
          model: plan.req.model,
          stop_reason: null,
          stop_sequence: null,
          usage: usage(plan, 'start'),
        },
      }) +
      (plan.thinking === undefined ? '' : thinkingEvents(plan.thinking)) +
      event('content_block_start', {
        type: 'content_block_start',
        index: textBlock(plan),
        content_block: { type: 'text', text: '' },
      }) +
      event('ping', { type: 'ping' }),
    token: (plan, _index, text) =>
      event('content_block_delta', {
        type: 'content_block_delta',
        index: textBlock(plan),
        delta: { type: 'text_delta', text },
      }),
    // Content blocks follow one another: the thinking, the text, then a tool_use block per call.
    toolCall(plan, _index, call, piece, first) {
      const c = plan.choices[0]!.calls[call]!;
      const block = textBlock(plan) + call + 1;
      const opening = first
        ? event('content_block_stop', { type: 'content_block_stop', index: block - 1 }) +
          event('content_block_start', {
            type: 'content_block_start',
            index: block,
            content_block: { type: 'tool_use', id: c.id, name: c.name, input: {} },
          })
        : '';
      return (
        opening +
        event('content_block_delta', {
          type: 'content_block_delta',
          index: block,
          delta: { type: 'input_json_delta', partial_json: piece },
        })
      );
    },
    finish: (plan, _index, reason) =>
      event('content_block_stop', {
        type: 'content_block_stop',
        index: textBlock(plan) + plan.choices[0]!.calls.length,
      }) +
      event('message_delta', {
        type: 'message_delta',
        delta: {
          stop_reason: reason,
          stop_sequence: reason === 'stop_sequence' ? (plan.req.body?.stop_sequences?.[0] ?? null) : null,
        },
        usage: usage(plan, 'delta'),
      }),
    end: () => event('message_stop', { type: 'message_stop' }),
    error: (_plan, message) =>
      event('error', { type: 'error', error: { type: 'overloaded_error', message: message || 'Overloaded' } }),
  },
  complete: (plan, texts, reasons) => ({
    id: MESSAGE_ID,
    type: 'message',
    role: 'assistant',
    model: plan.req.model,
    content: [
      ...(plan.thinking === undefined ? [] : [{ type: 'thinking', thinking: plan.thinking, signature: SIGNATURE }]),
      ...(texts[0] || plan.choices[0]!.calls.length === 0 ? [{ type: 'text', text: texts[0] ?? '' }] : []),
      ...plan.choices[0]!.calls.map((c) => ({
        type: 'tool_use',
        id: c.id,
        name: c.name,
        input: JSON.parse(c.pieces.join('')) as unknown,
      })),
    ],
    stop_reason: reasons[0],
    stop_sequence: null,
    usage: usage(plan, 'whole'),
  }),
};

export type FakeAnthropic = FakeUpstream & { apiKey: string };

/** A fake Anthropic API on 127.0.0.1; point the SDK's baseURL at `fake.url` with apiKey FAKE_ANTHROPIC_KEY. */
export async function startFakeAnthropic(): Promise<FakeAnthropic> {
  const fake = (await new FakeUpstream(anthropicWire).listen()) as FakeAnthropic;
  fake.apiKey = FAKE_ANTHROPIC_KEY;
  return fake;
}
