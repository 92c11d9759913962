// Closed-loop load: `concurrency` clients over keep-alive connections, each sending its next
// request when the last one ends, until `requests` have been sent. Time to first token is to the
// first SSE event with non-empty delta.content (streams) or to the response headers (JSON).
import http from 'node:http';
import { createParser } from 'eventsource-parser';

export interface LoadSpec {
  url: string;
  apiKey: string;
  body: Record<string, unknown>;
  stream: boolean;
  concurrency: number;
  requests: number;
  timeoutMs?: number;
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

function one(agent: http.Agent, spec: LoadSpec, payload: string): Promise<Sample> {
  const u = new URL(spec.url);
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let ttft = -1;
    const req = http.request(
      {
        host: u.hostname,
        port: u.port,
        path: u.pathname,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), authorization: `Bearer ${spec.apiKey}` },
        timeout: spec.timeoutMs ?? 60_000,
      },
      (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          res.on('end', () => reject(new Error(`status ${res.statusCode}`)));
          return;
        }
        if (!spec.stream) ttft = performance.now() - start;
        const parser = spec.stream
          ? createParser({
              onEvent: (e) => {
                if (ttft < 0 && e.data !== '[DONE]' && e.data.includes('"content":"') && !e.data.includes('"content":""')) ttft = performance.now() - start;
              },
            })
          : undefined;
        res.setEncoding('utf8');
        res.on('data', (d: string) => parser?.feed(d));
        res.on('end', () => resolve({ ttftMs: ttft, totalMs: performance.now() - start }));
        res.on('error', reject);
      },
    );
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

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/**
 * Opens `count` streams that stay idle (the upstream holds its first token back) and resolves
 * when every one has its response headers; `close()` ends them.
 */
export async function holdStreams(spec: Omit<LoadSpec, 'requests' | 'concurrency' | 'stream'>, count: number): Promise<{ established: number; close(): void }> {
  const agent = new http.Agent({ keepAlive: false, maxSockets: count + 10 });
  const u = new URL(spec.url);
  const payload = JSON.stringify({ ...spec.body, stream: true });
  const reqs: http.ClientRequest[] = [];
  const opened = await Promise.allSettled(
    Array.from(
      { length: count },
      () =>
        new Promise<void>((resolve, reject) => {
          const req = http.request(
            {
              host: u.hostname,
              port: u.port,
              path: u.pathname,
              method: 'POST',
              agent,
              headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload), authorization: `Bearer ${spec.apiKey}` },
            },
            (res) => {
              res.on('data', () => undefined);
              res.on('error', () => undefined);
              if (res.statusCode === 200) resolve();
              else reject(new Error(`status ${res.statusCode}`));
            },
          );
          req.on('error', reject);
          req.end(payload);
          reqs.push(req);
        }),
    ),
  );
  return {
    established: opened.filter((o) => o.status === 'fulfilled').length,
    close() {
      for (const r of reqs) r.destroy();
      agent.destroy();
    },
  };
}
