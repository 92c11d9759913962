import { createParser } from 'eventsource-parser';
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
  | 'left';

export interface Outcome {
  stream: boolean;
  ending: Ending;
  status: number;
  /** The completion id, when the client saw one (every stream chunk, a whole answer). */
  id?: string;
  /** The error event's or error body's code. */
  errorCode?: string;
  /** Completion tokens the client received: each choice's text counted whole, or a whole answer's usage. */
  received: number;
  startedAt: number;
  endedAt: number;
  /** The request's unique question: the upstream fake's recorded requests are matched on it. */
  question: string;
  /** Its choices (n): a relay message carries at most a token of each, at the suite's token pace. */
  choices: number;
}

export interface LoadOptions {
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

/** One request, read to its end as a client would. */
async function send(
  url: string,
  apiKey: string,
  body: Record<string, unknown>,
  question: string,
  patienceMs: number,
  leaveAfterMs: number | undefined,
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
    startedAt,
    endedAt: 0,
    question,
    choices,
  };
  const gaveUp = () => ({ ...out, ending: 'left' as const, endedAt: performance.now() });
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
      const json = text
        ? (JSON.parse(text) as { id?: string; usage?: { completion_tokens: number }; error?: { code?: string } })
        : {};
      if (res.status === 200) {
        out.id = json.id;
        out.received = json.usage?.completion_tokens ?? 0;
      } else {
        out.ending = 'failed';
        out.errorCode = json.error?.code;
      }
    } else {
      const text = streamText;
      let done = false;
      const parser = createParser({
        onEvent: (e) => {
          if (e.data === '[DONE]') return void (done = true);
          const chunk = JSON.parse(e.data) as {
            id?: string;
            error?: { code?: string };
            choices?: { index: number; delta?: { content?: string } }[];
          };
          if (chunk.error) {
            out.ending = 'failed';
            out.errorCode = chunk.error.code;
            return;
          }
          out.id ??= chunk.id;
          for (const c of chunk.choices ?? []) text[c.index] = (text[c.index] ?? '') + (c.delta?.content ?? '');
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

/**
 * Closed-loop clients: each sends a request, reads it to the end, and sends the next, until
 * `until`. A request refused at the connection (its web process is down) goes to the next web
 * process and is not counted: a load balancer would not have sent it there.
 */
export async function runLoad(opts: LoadOptions): Promise<Outcome[]> {
  const outcomes: Outcome[] = [];
  let turn = 0;
  const client = async () => {
    while (performance.now() < opts.until) {
      const webs = opts.webs();
      const url = `${webs[turn++ % webs.length]}/v1/chat/completions`;
      const stream = Math.random() < opts.streamShare;
      const question = `Question ${Math.random().toString(36).slice(2)}: tell me about faults`;
      const body = {
        model: opts.model,
        messages: [{ role: 'user', content: question }],
        max_tokens: 20 + Math.floor(Math.random() * 60),
        n: Math.random() < 0.15 ? 2 : 1,
        stream,
      };
      const outcome = await send(url, pick(opts.apiKeys), body, question, opts.patienceMs, opts.leaveAfterMs);
      if (outcome === 'refused') {
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      outcomes.push(outcome);
    }
  };
  await Promise.all(Array.from({ length: opts.clients }, client));
  return outcomes;
}
