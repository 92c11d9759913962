import { createParser, type EventSourceMessage } from 'eventsource-parser';
import { countTokens } from '../../src/providers/tokenizer.js';

/** How one request ended, as its client saw it. */
export type Ending =
  /** A whole answer, or a stream that ended with [DONE] and no error. */
  | 'completed'
  /** An HTTP error status, or a stream that ended with an error event: a clean failure. */
  | 'failed'
  /** The connection was cut before the end (the web process holding it died). */
  | 'cut'
  /** No end within the client's patience. */
  | 'hung'
  /** The client gave up waiting for a whole answer and left (LoadOptions.leaveAfterMs). */
  | 'left'
  /** A background response its client cancelled, ended cancelled. */
  | 'cancelled';

export interface Outcome {
  stream: boolean;
  ending: Ending;
  status: number;
  /** The completion id, when the client saw one (every stream chunk, a whole answer). */
  id?: string;
  /** The error event's or error body's code. */
  errorCode?: string;
  /**
   * Completion tokens the client received: each choice's text counted whole, or a whole answer's
   * usage; a background response's stored output (run.ts fills it in).
   */
  received: number;
  /** The output tokens the service told the client it billed: a Response's usage, at its end or stored. */
  shown: number[];
  /** When the client left (gave up waiting) or cancelled its background response. */
  leftAt?: number;
  startedAt: number;
  endedAt: number;
  /** The request's unique question: the upstream fake's recorded requests are matched on it. */
  question: string;
  /** Its choices (n): a relay message carries at most a token of each, at the suite's token pace. */
  choices: number;
}

/** What the clients send: chat completions, Responses API requests, or background responses. */
export type LoadWire = 'chat' | 'responses' | 'background';

export interface LoadOptions {
  wire?: LoadWire;
  /** The share of background responses their clients cancel, at a random moment in their first 2.5 s. */
  cancelShare?: number;
  webs: () => string[];
  apiKeys: string[];
  model: string;
  clients: number;
  streamShare: number;
  /** New requests stop being sent at this time (performance.now()). */
  until: number;
  /** A request not ended after this long counts as hung. */
  patienceMs: number;
  /** Non-streaming clients give up and leave after this long without an answer (default: never). */
  leaveAfterMs?: number;
}

function pick<T>(xs: T[]): T {
  return xs[Math.floor(Math.random() * xs.length)]!;
}

/** One wire format as its client reads it: the whole answer's body, and its stream's events. */
interface WireReader {
  path: string;
  /** The request a client of this format sends for `question`. */
  body(model: string, question: string, stream: boolean): Record<string, unknown>;
  /** A 200 answer's JSON body. */
  answer(json: Record<string, unknown>, out: Outcome): void;
  /** One stream event, its text appended to `text` by choice; true when it is the stream's last. */
  event(e: EventSourceMessage, out: Outcome, text: string[]): boolean;
}

const maxTokens = () => 20 + Math.floor(Math.random() * 60);

const CHAT: WireReader = {
  path: '/v1/chat/completions',
  body: (model, question, stream) => ({
    model,
    messages: [{ role: 'user', content: question }],
    max_tokens: maxTokens(),
    n: Math.random() < 0.15 ? 2 : 1,
    stream,
  }),
  answer(json, out) {
    out.id = json.id as string | undefined;
    out.received = (json.usage as { completion_tokens?: number } | undefined)?.completion_tokens ?? 0;
  },
  event(e, out, text) {
    if (e.data === '[DONE]') return true;
    const chunk = JSON.parse(e.data) as {
      id?: string;
      error?: { code?: string };
      choices?: { index: number; delta?: { content?: string } }[];
    };
    if (chunk.error) {
      out.ending = 'failed';
      out.errorCode = chunk.error.code;
      return false;
    }
    out.id ??= chunk.id;
    for (const c of chunk.choices ?? []) text[c.index] = (text[c.index] ?? '') + (c.delta?.content ?? '');
    return false;
  },
};

interface ResponseObject {
  id?: string;
  status?: string;
  usage?: { output_tokens?: number };
  error?: { code?: string; message?: string } | null;
}

/** A failed Response's own code: OpenAI's `error.code` is generic, the service's code leads the message. */
const failureCode = (r: ResponseObject): string | undefined => r.error?.message?.split(':')[0] ?? r.error?.code;

/**
 * OpenAI's Responses API: events named by `event:`, the id in response.created, the text in
 * response.output_text.delta; it ends with response.completed, response.incomplete or
 * response.failed (each carrying the usage), or the web tier's `error` event, and has no [DONE].
 */
const RESPONSES: WireReader = {
  path: '/v1/responses',
  body: (model, question, stream) => ({ model, input: question, max_output_tokens: maxTokens(), stream }),
  answer(json, out) {
    const r = json as ResponseObject;
    out.id = r.id;
    out.received = r.usage?.output_tokens ?? 0;
    if (r.usage?.output_tokens !== undefined) out.shown.push(r.usage.output_tokens);
  },
  event(e, out, text) {
    const data = JSON.parse(e.data) as { response?: ResponseObject; delta?: string; code?: string };
    switch (e.event) {
      case 'response.created':
        out.id ??= data.response?.id;
        return false;
      case 'response.output_text.delta':
        text[0] = (text[0] ?? '') + (data.delta ?? '');
        return false;
      case 'response.completed':
      case 'response.incomplete':
      case 'response.failed':
        // Each end carries the usage that was billed.
        if (e.event === 'response.failed') {
          out.ending = 'failed';
          out.errorCode = failureCode(data.response ?? {});
        }
        if (data.response?.usage?.output_tokens !== undefined) out.shown.push(data.response.usage.output_tokens);
        return true;
      case 'error':
        out.ending = 'failed';
        out.errorCode = data.code;
        return true;
      default:
        return false;
    }
  },
};

/** One request, read to its end as a client would. `onId` is told the id as soon as the client has it. */
async function send(
  url: string,
  apiKey: string,
  wire: WireReader,
  body: Record<string, unknown>,
  question: string,
  patienceMs: number,
  leaveAfterMs: number | undefined,
  onId?: (id: string) => void,
): Promise<Outcome | 'refused'> {
  const stream = body.stream === true;
  const startedAt = performance.now();
  const leaves = !stream && leaveAfterMs !== undefined ? AbortSignal.timeout(leaveAfterMs) : undefined;
  const signal = leaves ? AbortSignal.any([AbortSignal.timeout(patienceMs), leaves]) : AbortSignal.timeout(patienceMs);
  const choices = typeof body.n === 'number' ? body.n : 1;
  const out: Outcome = {
    stream,
    ending: 'completed',
    status: 0,
    received: 0,
    shown: [],
    startedAt,
    endedAt: 0,
    question,
    choices,
  };
  const gaveUp = () => {
    const now = performance.now();
    return { ...out, ending: 'left' as const, endedAt: now, leftAt: now };
  };
  let res: Response;
  try {
    res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify(body),
      signal,
    });
  } catch (err) {
    if (leaves?.aborted) return gaveUp();
    if (signal.aborted) return { ...out, ending: 'hung', endedAt: performance.now() };
    // Nothing answered: not a request the service saw (its web process is down); the client tries another.
    const code = (err as { cause?: { code?: string } }).cause?.code;
    if (code === 'ECONNREFUSED') return 'refused';
    return { ...out, ending: 'cut', endedAt: performance.now() };
  }
  out.status = res.status;
  // Filled as events arrive, so a cut stream counts what it had received before the cut.
  const streamText: string[] = [];
  const countReceived = () => (out.received = streamText.reduce((sum, t) => sum + countTokens(t ?? ''), 0));
  const isStream = (res.headers.get('content-type') ?? '').startsWith('text/event-stream');
  try {
    if (!isStream) {
      const text = await res.text();
      const json = (text ? JSON.parse(text) : {}) as Record<string, unknown> & { error?: { code?: string } };
      if (res.status === 200) {
        wire.answer(json, out);
        if (out.id) onId?.(out.id);
      } else {
        out.ending = 'failed';
        out.errorCode = json.error?.code;
      }
    } else {
      let done = false;
      const parser = createParser({
        onEvent: (e) => {
          const hadId = out.id !== undefined;
          if (wire.event(e, out, streamText)) done = true;
          if (!hadId && out.id) onId?.(out.id);
        },
      });
      const decoder = new TextDecoder();
      for await (const part of res.body as unknown as AsyncIterable<Uint8Array>)
        parser.feed(decoder.decode(part, { stream: true }));
      countReceived();
      if (!done) out.ending = 'cut';
    }
  } catch {
    if (leaves?.aborted) return gaveUp();
    out.ending = signal.aborted ? 'hung' : 'cut';
    if (isStream) countReceived();
  }
  out.endedAt = performance.now();
  return out;
}

const TERMINAL = new Set(['completed', 'incomplete', 'failed', 'cancelled']);
const POLL_MS = 500;
const hold = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function call(url: string, apiKey: string, method: 'GET' | 'POST'): Promise<ResponseObject | undefined> {
  try {
    const res = await fetch(url, { method, headers: { authorization: `Bearer ${apiKey}` } });
    return res.status === 200 ? ((await res.json()) as ResponseObject) : undefined;
  } catch {
    // A web process that is down, or a reply cut: the client asks again at its next poll.
    return undefined;
  }
}

/**
 * A background response (background: true), as OpenAI's docs use it: created (queued, or its
 * stream read), cancelled by some clients after a while, and polled with GET until it has ended.
 * Its ending is the status it ended with; what it received is read from the stored response
 * (run.ts), since a cancelled one's output and usage are filled in once its worker has stopped.
 */
async function background(
  web: string,
  apiKey: string,
  body: Record<string, unknown>,
  question: string,
  opts: LoadOptions,
): Promise<Outcome | 'refused'> {
  let cancelAt: number | undefined;
  let cancelled: Promise<unknown> = Promise.resolve();
  const cancels = Math.random() < (opts.cancelShare ?? 0);
  const onId = (id: string) => {
    if (!cancels) return;
    cancelled = hold(Math.random() * 2500).then(() => {
      cancelAt = performance.now();
      return call(`${web}/v1/responses/${id}/cancel`, apiKey, 'POST');
    });
  };
  const created = await send(
    `${web}${RESPONSES.path}`,
    apiKey,
    RESPONSES,
    { ...body, background: true },
    question,
    opts.patienceMs,
    undefined,
    onId,
  );
  if (created === 'refused' || !created.id || created.ending === 'hung') return created;
  const out: Outcome = { ...created, received: 0 };
  const deadline = created.startedAt + opts.patienceMs;
  for (;;) {
    const r = await call(`${web}/v1/responses/${created.id}`, apiKey, 'GET');
    if (r?.status && TERMINAL.has(r.status)) {
      out.endedAt = performance.now();
      out.ending = r.status === 'failed' ? 'failed' : r.status === 'cancelled' ? 'cancelled' : 'completed';
      out.errorCode = r.status === 'failed' ? failureCode(r) : undefined;
      break;
    }
    if (performance.now() > deadline) return { ...out, ending: 'hung', endedAt: performance.now() };
    await hold(POLL_MS);
  }
  await cancelled;
  if (out.ending === 'cancelled') out.leftAt = cancelAt;
  return out;
}

/**
 * Closed-loop clients: each sends a request, reads it to the end, and sends the next, until
 * `until`. A request refused at the connection (its web process is down) goes to the next web
 * process and is not counted: a load balancer would not have sent it there.
 */
export async function runLoad(opts: LoadOptions): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  const wire = (opts.wire ?? 'chat') === 'chat' ? CHAT : RESPONSES;
  let turn = 0;
  const client = async () => {
    while (performance.now() < opts.until) {
      const webs = opts.webs();
      const web = webs[turn++ % webs.length]!;
      const stream = Math.random() < opts.streamShare;
      const question = `Question ${Math.random().toString(36).slice(2)}: tell me about faults`;
      const body = wire.body(opts.model, question, stream);
      const apiKey = pick(opts.apiKeys);
      const outcome =
        opts.wire === 'background'
          ? await background(web, apiKey, body, question, opts)
          : await send(`${web}${wire.path}`, apiKey, wire, body, question, opts.patienceMs, opts.leaveAfterMs);
      if (outcome === 'refused') {
        await hold(50);
        continue;
      }
      outcomes.push(outcome);
    }
  };
  await Promise.all(Array.from({ length: opts.clients }, client));
  return outcomes;
}
