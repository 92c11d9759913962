import http from 'node:http';
import https from 'node:https';
import { createParser } from 'eventsource-parser';

/**
 * POST a JSON body and iterate the server-sent events of the answer (or read one JSON answer),
 * over Node's own HTTP client with keep-alive connections and the eventsource-parser library.
 * This is the hot path of every completion: measured against the SDK route (fetch, web streams
 * and the SDK's own decoder) it costs a fraction of the CPU per streamed token, which is what
 * lets one worker keep up.
 */

export interface SseResponseError {
  status: number;
  headers: Headers;
  /** The error body as the upstream sent it (parsed JSON when it was JSON). */
  body: unknown;
}

export class UpstreamHttpError extends Error {
  constructor(readonly response: SseResponseError) {
    super(`upstream answered ${response.status}`);
    this.name = 'UpstreamHttpError';
  }
}

const agents = {
  http: new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' }),
  https: new https.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' }),
};

function toHeaders(raw: http.IncomingHttpHeaders): Headers {
  const h = new Headers();
  for (const [k, v] of Object.entries(raw)) if (v !== undefined) h.set(k, Array.isArray(v) ? v.join(', ') : v);
  return h;
}

/** POSTs `body` as JSON; resolves with a 2xx answer, throws UpstreamHttpError (with the error body read) otherwise. */
async function post(
  url: string,
  headers: Record<string, string>,
  body: unknown,
  accept: string,
  signal: AbortSignal,
): Promise<http.IncomingMessage> {
  const u = new URL(url);
  const payload = JSON.stringify(body);
  const secure = u.protocol === 'https:';
  const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
    const req = (secure ? https : http).request(
      {
        method: 'POST',
        host: u.hostname,
        port: u.port || (secure ? 443 : 80),
        path: `${u.pathname}${u.search}`,
        agent: secure ? agents.https : agents.http,
        headers: {
          ...headers,
          'content-type': 'application/json',
          accept,
          'content-length': Buffer.byteLength(payload),
        },
        signal,
      },
      resolve,
    );
    req.once('error', reject);
    req.end(payload);
  });
  if (res.statusCode && res.statusCode >= 200 && res.statusCode < 300) return res;
  const text = await readText(res);
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: keep the text
  }
  throw new UpstreamHttpError({ status: res.statusCode ?? 0, headers: toHeaders(res.headers), body: parsed });
}

async function readText(res: http.IncomingMessage): Promise<string> {
  let text = '';
  res.setEncoding('utf8');
  for await (const part of res) text += part;
  return text;
}

/** Yields the `data` of each SSE event; throws UpstreamHttpError for a non-2xx answer. */
export async function* postForEvents(
  url: string,
  headers: Record<string, string>,
  body: unknown,
  signal: AbortSignal,
): AsyncGenerator<string> {
  const res = await post(url, headers, body, 'text/event-stream', signal);
  const ready: string[] = [];
  const parser = createParser({ onEvent: (e) => ready.push(e.data) });
  res.setEncoding('utf8');
  for await (const part of res as AsyncIterable<string>) {
    parser.feed(part);
    while (ready.length > 0) yield ready.shift()!;
  }
}

/** The parsed JSON answer (read to its end, so the connection goes back to the pool); throws UpstreamHttpError for a non-2xx answer. */
export async function postForJson(
  url: string,
  headers: Record<string, string>,
  body: unknown,
  signal: AbortSignal,
): Promise<unknown> {
  const res = await post(url, headers, body, 'application/json', signal);
  return JSON.parse(await readText(res)) as unknown;
}
