// Closed-loop load: `concurrency` clients over keep-alive connections, each sending its next
// request when the last one ends, until `requests` have been sent. Time to first token is to the
// first SSE event with text: a chat chunk with non-empty delta.content, or a Responses API
// response.output_text.delta (streams); to the response headers (JSON). A Responses stream counts
// only if it ends with response.completed, as a client reading it to its end would need.
import http from 'node:http';
import { createParser } from 'eventsource-parser';

export interface LoadSpec {
  url: string;
  apiKey: string;
  body: Record<string, unknown>;
  stream: boolean;
  /** The wire format of the URL's answers: chat completions (the default) or the Responses API. */
  api?: 'chat' | 'responses';
  concurrency: number;
  requests: number;
  timeoutMs?: number;
  /** Extra request headers (a peer gateway's routing headers). */
  headers?: Record<string, string>;
}

export interface Sample {
  ttftMs: number;
  totalMs: number;
}

export interface LoadResult {
  samples: Sample[];
  errors: Record<string, number>;
  wallMs: number;
}

/** The POST of `payload` to the spec's URL with its key and headers, over `agent`. */
function postOptions(
  spec: Pick<LoadSpec, 'url' | 'apiKey' | 'headers'>,
  agent: http.Agent,
  payload: string,
): http.RequestOptions {
  const u = new URL(spec.url);
  return {
    host: u.hostname,
    port: u.port,
    path: u.pathname,
    method: 'POST',
    agent,
    headers: {
      ...spec.headers,
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(payload),
      authorization: `Bearer ${spec.apiKey}`,
    },
  };
}

function one(agent: http.Agent, spec: Omit<LoadSpec, 'concurrency' | 'requests'>, payload: string): Promise<Sample> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let ttft = -1;
    const req = http.request({ ...postOptions(spec, agent, payload), timeout: spec.timeoutMs ?? 60_000 }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        res.on('end', () => reject(new Error(`status ${res.statusCode}`)));
        return;
      }
      if (!spec.stream) ttft = performance.now() - start;
      const responses = spec.api === 'responses';
      let terminal: string | undefined;
      const parser = !spec.stream
        ? undefined
        : responses
          ? createParser({
              onEvent: (e) => {
                if (ttft < 0 && e.event === 'response.output_text.delta') ttft = performance.now() - start;
                else if (
                  e.event === 'response.completed' ||
                  e.event === 'response.incomplete' ||
                  e.event === 'response.failed'
                )
                  terminal = e.event;
              },
            })
          : createParser({
              onEvent: (e) => {
                if (
                  ttft < 0 &&
                  e.data !== '[DONE]' &&
                  e.data.includes('"content":"') &&
                  !e.data.includes('"content":""')
                )
                  ttft = performance.now() - start;
              },
            });
      res.setEncoding('utf8');
      res.on('data', (d: string) => parser?.feed(d));
      res.on('end', () => {
        if (responses && spec.stream && terminal !== 'response.completed')
          reject(new Error(`stream ended with ${terminal ?? 'no terminal event'}`));
        else resolve({ ttftMs: ttft, totalMs: performance.now() - start });
      });
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(payload);
  });
}

export async function runLoad(spec: LoadSpec): Promise<LoadResult> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: spec.concurrency });
  const payload = JSON.stringify({ ...spec.body, stream: spec.stream });
  const samples: Sample[] = [];
  const errors: Record<string, number> = {};
  let next = 0;
  const start = performance.now();
  await Promise.all(
    Array.from({ length: spec.concurrency }, async () => {
      while (next < spec.requests) {
        next++;
        try {
          samples.push(await one(agent, spec, payload));
        } catch (err) {
          const k = (err as Error).message;
          errors[k] = (errors[k] ?? 0) + 1;
        }
      }
    }),
  );
  const wallMs = performance.now() - start;
  agent.destroy();
  return { samples, errors, wallMs };
}

export interface OpenLoopSpec extends Omit<LoadSpec, 'concurrency' | 'requests'> {
  /** Mean arrivals per second. */
  rate: number;
  /** Arrivals stop after this long; the run ends when the last request does. */
  durationMs: number;
  /** Uniform [0, 1) numbers for the arrival times, so every side can be given the same schedule. */
  random: () => number;
}

/**
 * Open-loop load: requests arrive as a Poisson process at `rate` per second for `durationMs`,
 * each sent at its arrival time whether or not earlier ones have finished, so a slow side shows
 * its queueing in the latencies instead of hiding it behind a lower throughput (as a closed loop
 * does). Latencies are measured from each request's scheduled arrival, so a load generator that
 * falls behind its schedule counts against the side, not for it.
 */
export async function runOpenLoop(spec: OpenLoopSpec): Promise<LoadResult & { lateMs: number }> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });
  const payload = JSON.stringify({ ...spec.body, stream: spec.stream });
  const arrivals: number[] = [];
  for (let t = 0; ;) {
    t += (-Math.log(1 - spec.random()) / spec.rate) * 1000;
    if (t >= spec.durationMs) break;
    arrivals.push(t);
  }
  const samples: Sample[] = [];
  const errors: Record<string, number> = {};
  const inflight: Promise<void>[] = [];
  let lateMs = 0;
  const start = performance.now();
  for (const at of arrivals) {
    const wait = start + at - performance.now();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const behind = performance.now() - (start + at);
    lateMs = Math.max(lateMs, behind);
    inflight.push(
      one(agent, spec, payload).then(
        (s) => void samples.push({ ttftMs: s.ttftMs + behind, totalMs: s.totalMs + behind }),
        (err: Error) => void (errors[err.message] = (errors[err.message] ?? 0) + 1),
      ),
    );
  }
  await Promise.all(inflight);
  const wallMs = performance.now() - start;
  agent.destroy();
  return { samples, errors, wallMs, lateMs };
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/**
 * Opens `count` streams that stay idle (the upstream holds its first token back) and resolves
 * when every one has its response headers; `close()` ends them. At most `opening` are being
 * opened at once, so a large count does not overflow the server's accept backlog.
 */
export async function holdStreams(
  spec: Omit<LoadSpec, 'requests' | 'concurrency' | 'stream'>,
  count: number,
  opening = 1000,
): Promise<{ established: number; close(): void }> {
  const agent = new http.Agent({ keepAlive: false, maxSockets: count + 10 });
  const payload = JSON.stringify({ ...spec.body, stream: true });
  const reqs: http.ClientRequest[] = [];
  const openOne = () =>
    new Promise<void>((resolve, reject) => {
      const req = http.request(postOptions(spec, agent, payload), (res) => {
        res.on('data', () => undefined);
        res.on('error', () => undefined);
        if (res.statusCode === 200) resolve();
        else reject(new Error(`status ${res.statusCode}`));
      });
      req.on('error', reject);
      req.end(payload);
      reqs.push(req);
    });
  let next = 0;
  let established = 0;
  await Promise.all(
    Array.from({ length: Math.min(opening, count) }, async () => {
      while (next < count) {
        next++;
        await openOne().then(
          () => void established++,
          () => undefined,
        );
      }
    }),
  );
  return {
    established,
    close() {
      for (const r of reqs) r.destroy();
      agent.destroy();
    },
  };
}
