import { createParser, type EventSourceMessage } from 'eventsource-parser';

export interface SseResult {
  status: number;
  headers: Headers;
  /** The `data:` payload of every event, in order (including "[DONE]"). */
  events: string[];
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
  let raw = '';
  if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    const text = await res.text();
    return { status: res.status, headers: res.headers, events, chunks: [], raw: text, body: text ? JSON.parse(text) : undefined };
  }
  const parser = createParser({ onEvent: (e: EventSourceMessage) => events.push(e.data) });
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
