// The machinery the provider fakes share: a real HTTP server on 127.0.0.1, request recording,
// per-request scripted replies (errors, delays, hangs, cut connections) and paced SSE writing.
// Each provider file supplies only its wire format.
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { sleep } from '../../clock.js';
import type { TokenUsage } from '../types.js';

export interface RecordedRequest {
  method: string;
  /** Path and query as received, e.g. /v1/chat/completions. */
  path: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body (undefined when there was none). */
  body: any;
  /** True once the client went away before the fake finished its answer (an abort). */
  closedEarly: boolean;
  /** Settles when the connection for this request is done, finished or cut. */
  closed: Promise<void>;
  /** performance.now() when the request arrived, and when its connection was done (undefined until then). */
  startedAt: number;
  closedAt?: number;
}

/** Answer with an HTTP error in the provider's own error format. */
export interface ErrorReply {
  status: number;
  message?: string;
  /** The provider's error type/status word; a sensible one per status by default. */
  type?: string;
  /** Retry-After header, in seconds. */
  retryAfter?: number;
  /** retry-after-ms header (OpenAI and Anthropic send it). */
  retryAfterMs?: number;
  headers?: Record<string, string>;
  /** Replaces the whole error body. */
  body?: unknown;
}

/** Answer with a (possibly misbehaving) completion. */
export interface StreamScript {
  /** The text pieces of every choice; each piece is one streamed token. */
  tokens?: string[];
  /** Per-choice pieces (index = choice), overriding `tokens`. */
  choices?: string[][];
  /** Finish reason in the provider's own words (stop, end_turn, STOP, ...). */
  finishReason?: string;
  /**
   * Tool calls every choice makes after its text (with these, `tokens` defaults to none), each
   * streamed as its argument pieces; the finish is the provider's word for a tool call.
   */
  toolCalls?: { id?: string; name: string; arguments: string[] }[];
  /** Usage to report; null leaves it out. Defaults to a rough count of the request and the tokens sent. */
  usage?: ScriptedUsage | null;
  /**
   * The model's thinking, sent before the answer where the provider sends it (an Anthropic
   * thinking block, a Gemini part marked `thought`); OpenAI's wire has no place for it.
   */
  thinking?: string;
  /** Wait this long before sending the response headers. */
  delayMs?: number;
  /** Wait this long between two tokens. */
  tokenDelayMs?: number;
  /** Cut the connection after this many tokens (no finish, no usage). */
  failAfter?: number;
  /** Send the provider's in-stream error event after this many tokens. */
  errorAfter?: number;
  /** Accept the request and never answer. */
  hang?: boolean;
  /** Send this many tokens, then go silent without closing. */
  hangAfter?: number;
  /** Send this many tokens (fewer than the answer has), then the rest once `until` settles: a test holds streams open. */
  holdAfter?: { tokens: number; until: Promise<unknown> };
}

/**
 * What a fake says a request used, in neutral words each wire format states its own way: `prompt`
 * is every prompt token, the cached and written ones included (OpenAI's meaning; Anthropic's
 * input_tokens is what is left); `completion` is the answer's tokens and `thoughts` the thinking
 * before it (OpenAI counts thoughts inside completion_tokens as reasoning_tokens, Anthropic inside
 * output_tokens as thinking_tokens, Gemini beside them as thoughtsTokenCount). A detail the script
 * leaves out is left off the wire, as OpenAI-compatible servers (vLLM, Ollama) leave it.
 */
export interface ScriptedUsage {
  prompt: number;
  /** The answer's tokens, thinking not included. */
  completion: number;
  /** Thinking tokens, billed as output: Gemini's thoughtsTokenCount, Anthropic's output_tokens_details.thinking_tokens. */
  thoughts?: number;
  /** Prompt tokens read from the provider's prompt cache (Anthropic's cache_read_input_tokens). */
  cached?: number;
  /** Prompt tokens written to Anthropic's prompt cache with the 5-minute TTL, and with the 1-hour TTL. */
  cacheWrite5m?: number;
  cacheWrite1h?: number;
}

export type FakeReply = ErrorReply | StreamScript;

const isError = (r: FakeReply): r is ErrorReply => typeof (r as ErrorReply).status === 'number';

export const DEFAULT_TOKENS = [
  'Hello',
  '!',
  ' This',
  ' is',
  ' a',
  ' scripted',
  ' answer',
  ' from',
  ' the',
  ' fake',
  '.',
];

/** What a provider fake reads from one chat request. */
export interface ChatRequest {
  model: string;
  stream: boolean;
  n: number;
  maxTokens: number | undefined;
  body: any;
}

export interface PlannedCall {
  id: string;
  name: string;
  pieces: string[];
}

/** One choice as the fake will answer it, finish reason in neutral words. */
export interface PlannedChoice {
  index: number;
  pieces: string[];
  calls: PlannedCall[];
  finish: 'stop' | 'length' | 'tool_calls';
}

export interface Plan {
  req: ChatRequest;
  choices: PlannedChoice[];
  /** The script's own finish reason (provider words), if it set one. */
  finishOverride: string | undefined;
  usage: ScriptedUsage | null;
  thinking: string | undefined;
}

/** Provider-specific pieces of a fake. */
export interface WireFormat {
  /** The chat request this path and body make, or undefined for an unknown route (404). */
  parse(method: string, url: URL, body: any): ChatRequest | undefined;
  authorized(headers: IncomingHttpHeaders, url: URL): boolean;
  /** Error body and status word for an HTTP error. */
  errorBody(status: number, message: string, type?: string): unknown;
  /** Provider's words for a neutral finish reason. */
  finishWord(finish: 'stop' | 'length' | 'tool_calls'): string;
  /** The SSE events of a streamed answer, as strings ready to write. */
  sse: {
    start(plan: Plan): string;
    token(plan: Plan, index: number, text: string): string;
    /** A piece of tool call `call` of choice `index` (its first piece when `first`). */
    toolCall(plan: Plan, index: number, call: number, piece: string, first: boolean): string;
    finish(plan: Plan, index: number, reason: string): string;
    end(plan: Plan): string;
    error(plan: Plan, message: string): string;
  };
  /** The JSON body of a non-streamed answer (each choice's tool calls are in plan.choices). */
  complete(plan: Plan, texts: string[], reasons: string[]): unknown;
}

const roughTokens = (body: unknown): number => Math.max(1, Math.ceil(JSON.stringify(body ?? '').length / 4));

export class FakeUpstream {
  readonly requests: RecordedRequest[] = [];
  url = '';
  /** Turn off to keep memory flat under load (benchmarks). */
  record = true;
  private readonly server: http.Server;
  private readonly queue: FakeReply[] = [];
  private fallback: FakeReply = {};

  /** TCP connections accepted so far: a client that reuses keep-alive connections opens few. */
  connections = 0;

  constructor(private readonly wire: WireFormat) {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', () => this.connections++);
    this.server.keepAliveTimeout = 60_000;
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The reply for the next request only (queued: several calls script several requests). */
  nextResponse(reply: FakeReply): this {
    this.queue.push(reply);
    return this;
  }

  /** The reply for every request from now on that has no queued reply. */
  script(reply: FakeReply): this {
    this.fallback = reply;
    return this;
  }

  /** Back to the default answer, no queued replies, no recorded requests. */
  reset(): this {
    this.queue.length = 0;
    this.fallback = {};
    this.requests.length = 0;
    return this;
  }

  get lastRequest(): RecordedRequest | undefined {
    return this.requests[this.requests.length - 1];
  }

  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeAllConnections();
    await closed;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body: any;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      body = undefined;
    }
    const url = new URL(req.url ?? '/', 'http://fake');
    let resolveClosed!: () => void;
    const recorded: RecordedRequest = {
      method: req.method ?? 'GET',
      path: req.url ?? '/',
      headers: req.headers,
      body,
      closedEarly: false,
      closed: new Promise<void>((r) => (resolveClosed = r)),
      startedAt: performance.now(),
    };
    res.once('close', () => {
      recorded.closedAt = performance.now();
      recorded.closedEarly = !res.writableFinished;
      resolveClosed();
    });
    if (this.record) this.requests.push(recorded);

    const chat = this.wire.parse(req.method ?? 'GET', url, body);
    if (!chat) return this.sendError(res, { status: 404, message: `Unknown route ${req.method} ${url.pathname}` });
    if (!this.wire.authorized(req.headers, url))
      return this.sendError(res, { status: 401, message: 'Invalid API key provided.' });

    const reply = this.queue.shift() ?? this.fallback;
    if (isError(reply)) return this.sendError(res, reply);
    await this.answer(res, chat, reply);
  }

  private sendError(res: ServerResponse, e: ErrorReply): void {
    const headers: Record<string, string> = { 'content-type': 'application/json', ...(e.headers ?? {}) };
    if (e.retryAfter !== undefined) headers['retry-after'] = String(e.retryAfter);
    if (e.retryAfterMs !== undefined) headers['retry-after-ms'] = String(e.retryAfterMs);
    const body = e.body ?? this.wire.errorBody(e.status, e.message ?? http.STATUS_CODES[e.status] ?? 'error', e.type);
    res.writeHead(e.status, headers).end(JSON.stringify(body));
  }

  private plan(chat: ChatRequest, s: StreamScript): Plan {
    const choices = Array.from({ length: chat.n }, (_, index): PlannedChoice => {
      let pieces = s.choices?.[index] ?? s.tokens ?? (s.toolCalls ? [] : DEFAULT_TOKENS);
      let finish: PlannedChoice['finish'] = s.toolCalls ? 'tool_calls' : 'stop';
      if (chat.maxTokens !== undefined && pieces.length > chat.maxTokens) {
        pieces = pieces.slice(0, chat.maxTokens);
        finish = 'length';
      }
      const calls = (s.toolCalls ?? []).map((c, k) => ({
        id: c.id ?? `call_fake${index}${k}`,
        name: c.name,
        pieces: c.arguments,
      }));
      return { index, pieces, calls, finish };
    });
    const completion = choices.reduce(
      (n, c) => n + c.pieces.length + c.calls.reduce((m, call) => m + call.pieces.length, 0),
      0,
    );
    const usage = s.usage === null ? null : (s.usage ?? { prompt: roughTokens(chat.body), completion });
    return { req: chat, choices, finishOverride: s.finishReason, usage, thinking: s.thinking };
  }

  private async answer(res: ServerResponse, chat: ChatRequest, s: StreamScript): Promise<void> {
    if (s.delayMs) await sleep(s.delayMs);
    if (s.hang || res.destroyed) return;
    const plan = this.plan(chat, s);
    const reason = (c: PlannedChoice) => plan.finishOverride ?? this.wire.finishWord(c.finish);

    if (!chat.stream) {
      const texts = plan.choices.map((c) => c.pieces.join(''));
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify(this.wire.complete(plan, texts, plan.choices.map(reason))));
      return;
    }

    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    const longest = Math.max(0, ...plan.choices.map((c) => c.pieces.length));
    const paced = Boolean(s.tokenDelayMs);
    let out = this.wire.sse.start(plan);
    const flush = () => {
      if (out) res.write(out);
      out = '';
    };
    for (let i = 0; i < longest; i++) {
      if (s.failAfter === i) {
        flush();
        res.socket?.end();
        return;
      }
      if (s.errorAfter === i) {
        out += this.wire.sse.error(plan, 'Internal error encountered while streaming.');
        res.end(out);
        return;
      }
      if (s.hangAfter === i) {
        flush();
        return;
      }
      if (s.holdAfter?.tokens === i) {
        flush();
        await s.holdAfter.until;
        if (res.destroyed) return;
      }
      for (const c of plan.choices) {
        const piece = c.pieces[i];
        if (piece !== undefined) out += this.wire.sse.token(plan, c.index, piece);
      }
      if (paced) {
        flush();
        await sleep(s.tokenDelayMs!);
        if (res.destroyed) return;
      }
    }
    if (s.failAfter !== undefined && s.failAfter >= longest) {
      flush();
      res.socket?.end();
      return;
    }
    if (s.hangAfter !== undefined && s.hangAfter >= longest) {
      flush();
      return;
    }
    for (const c of plan.choices) {
      c.calls.forEach((call, k) =>
        call.pieces.forEach((piece, i) => (out += this.wire.sse.toolCall(plan, c.index, k, piece, i === 0))),
      );
    }
    for (const c of plan.choices) out += this.wire.sse.finish(plan, c.index, reason(c));
    out += this.wire.sse.end(plan);
    res.end(out);
  }
}

/** What a provider's stream produced, gathered for assertions. */
export interface Collected {
  events: { type: string; [k: string]: unknown }[];
  texts: string[];
  finishes: Record<number, string>;
  /** The usage event's counts, parts (cached, reasoning, ...) only where the adapter reported them. */
  usage?: TokenUsage;
  error?: unknown;
}

/** Drains a Provider stream (typed loosely so test files need not import src types). */
export async function collectEvents(stream: AsyncIterable<{ type: string; [k: string]: any }>): Promise<Collected> {
  const out: Collected = { events: [], texts: [], finishes: {} };
  try {
    for await (const e of stream) {
      out.events.push(e);
      if (e.type === 'delta') out.texts[e.index] = (out.texts[e.index] ?? '') + e.content;
      else if (e.type === 'finish') out.finishes[e.index] = e.reason;
      else if (e.type === 'usage') {
        const { type: _usage, model: _model, ...counts } = e;
        out.usage = counts as TokenUsage;
      }
    }
  } catch (err) {
    out.error = err;
  }
  return out;
}
