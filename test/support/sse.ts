import { createParser, type EventSourceMessage } from 'eventsource-parser';

export interface SseResult {
  status: number;
  headers: Headers;
  /** The `data:` payload of every event, in order (including "[DONE]"). */
  events: string[];
  /** The `id:` of every event, in order ('' when an event has none). */
  ids: string[];
  /** Parsed JSON of every event except [DONE]. */
  chunks: any[];
  /** The body as received, comments included. */
  raw: string;
  /** JSON error body when the server answered with an error status instead of a stream. */
  body?: any;
}

/** Reads a whole SSE response with a real SSE parser, as a client would. */
export async function readSse(res: Response): Promise<SseResult> {
  const events: string[] = [];
  const ids: string[] = [];
  let raw = '';
  if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    const text = await res.text();
    return {
      status: res.status,
      headers: res.headers,
      events,
      ids,
      chunks: [],
      raw: text,
      body: text ? JSON.parse(text) : undefined,
    };
  }
  const parser = createParser({
    onEvent: (e: EventSourceMessage) => {
      events.push(e.data);
      ids.push(e.id ?? '');
    },
  });
  const decoder = new TextDecoder();
  for await (const part of res.body as unknown as AsyncIterable<Uint8Array>) {
    const text = decoder.decode(part, { stream: true });
    raw += text;
    parser.feed(text);
  }
  return {
    status: res.status,
    headers: res.headers,
    events,
    ids,
    chunks: events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e)),
    raw,
  };
}

export async function postStream(url: string, body: unknown, apiKey: string, signal?: AbortSignal): Promise<SseResult> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ ...(body as object), stream: true }),
    signal,
  });
  return readSse(res);
}

/** An open streaming request whose events arrive as they come, so a test can act mid-stream. */
export function openStream(url: string, apiKey: string, body: object) {
  return openEvents((signal) =>
    fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` },
      body: JSON.stringify({ ...body, stream: true }),
      signal,
    }),
  );
}

/** An open GET of a stream (a resumed one) whose events arrive as they come. */
export function openGetStream(url: string, apiKey: string, headers: Record<string, string> = {}) {
  return openEvents((signal) => fetch(url, { headers: { authorization: `Bearer ${apiKey}`, ...headers }, signal }));
}

function openEvents(start: (signal: AbortSignal) => Promise<Response>) {
  const controller = new AbortController();
  const events: string[] = [];
  const ids: string[] = [];
  let notify: () => void = () => {};
  const response = start(controller.signal);
  const finished = (async () => {
    const parser = createParser({
      onEvent: (e) => {
        events.push(e.data);
        ids.push(e.id ?? '');
        notify();
      },
    });
    const decoder = new TextDecoder();
    try {
      const res = await response;
      for await (const part of res.body as unknown as AsyncIterable<Uint8Array>)
        parser.feed(decoder.decode(part, { stream: true }));
    } catch {
      // aborted by the test
    }
    notify();
  })();
  return {
    events,
    /** The `id:` of every event, in order. */
    ids,
    controller,
    finished,
    /** Resolves once `n` events have arrived. */
    async waitFor(n: number) {
      while (events.length < n) await new Promise<void>((r) => (notify = r));
    },
    text: () =>
      events
        .filter((e) => e !== '[DONE]')
        .map((e) => JSON.parse(e))
        .map((c) => c.choices?.[0]?.delta?.content ?? '')
        .join(''),
  };
}
