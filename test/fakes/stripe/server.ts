import http from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import { StripeApiError } from './errors.js';
import type { Faults } from './faults.js';
import { parseStripeForm } from './form.js';
import { fingerprint, IdempotencyKeys } from './idempotency.js';
import { clone, randomId, type Obj } from './objects.js';
import type { Routes } from './routes.js';

export interface ReceivedRequest {
  method: string;
  path: string;
  query: Obj;
  body: Obj;
  idempotencyKey: string | undefined;
  stripeVersion: string | undefined;
  /** When it arrived (performance.now(), ms) and the status it got: for call rates in the invoicing benchmark. */
  at: number;
  status?: number;
}

/**
 * How the fake behaves under load, as Stripe does: each answer after a latency drawn from
 * [min, max] ms, and a token bucket of `opsPerSecond` (refilled continuously, holding one second's
 * worth) above which it answers 429 rate_limit. Both off unless asked for.
 */
export interface Traffic {
  latencyMs?: [number, number];
  opsPerSecond?: number;
}

/** Stripe's documented limiter: a bucket of one second's operations, refilled as time passes. */
class TokenBucket {
  private tokens: number;
  private last = performance.now();
  constructor(private readonly perSecond: number) {
    this.tokens = perSecond;
  }
  take(): boolean {
    const now = performance.now();
    this.tokens = Math.min(this.perSecond, this.tokens + ((now - this.last) * this.perSecond) / 1000);
    this.last = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/**
 * The HTTP side of the fake: records each request, applies injected faults, checks the secret
 * key, replays idempotent requests, runs the matching route and answers in Stripe's format
 * (JSON with request-id and stripe-version headers, errors as {error:{type, code, message, param}}).
 */
export class StripeHttpServer {
  /** Every request that reached the fake, in order (including failed and hung ones). */
  readonly requests: ReceivedRequest[] = [];
  private server: http.Server | undefined;
  private readonly hanging = new Set<http.ServerResponse>();
  private readonly idempotency = new IdempotencyKeys();
  private readonly bucket: TokenBucket | undefined;

  constructor(private readonly opts: { secretKey: string; routes: Routes; faults: Faults; traffic?: Traffic }) {
    this.bucket = opts.traffic?.opsPerSecond ? new TokenBucket(opts.traffic.opsPerSecond) : undefined;
  }

  /** Listens on a free local port; returns the base URL. */
  async start(): Promise<string> {
    const server = http.createServer((req, res) => void this.serve(req, res));
    this.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    for (const res of this.hanging) res.destroy();
    this.hanging.clear();
    const server = this.server;
    this.server = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private async serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const url = new URL(req.url ?? '/', 'http://fake');
    const method = req.method ?? 'GET';
    const text = Buffer.concat(chunks).toString('utf8');
    const query = parseStripeForm(url.search.slice(1));
    const body = parseStripeForm(text);
    const idempotencyKey = req.headers['idempotency-key'] as string | undefined;
    const received: ReceivedRequest = {
      method,
      path: url.pathname,
      query,
      body,
      idempotencyKey,
      stripeVersion: req.headers['stripe-version'] as string | undefined,
      at: performance.now(),
    };
    this.requests.push(received);
    // Counted on arrival, as Stripe's limiter does; the latency is the time to answer.
    const limited = this.bucket !== undefined && !this.bucket.take();
    const latency = this.opts.traffic?.latencyMs;
    if (latency)
      await new Promise((resolve) => setTimeout(resolve, latency[0] + Math.random() * (latency[1] - latency[0])));

    const requestId = randomId('req_', 14);
    const send = (status: number, payload: string, headers: Record<string, string> = {}) => {
      received.status = status;
      res.writeHead(status, {
        'content-type': 'application/json',
        'request-id': requestId,
        'stripe-version': Stripe.API_VERSION,
        ...(idempotencyKey ? { 'idempotency-key': idempotencyKey } : {}),
        ...headers,
      });
      res.end(payload);
    };

    const { faults, routes, secretKey } = this.opts;
    if (faults.takeHang(method, url.pathname)) {
      this.hanging.add(res);
      res.once('close', () => this.hanging.delete(res));
      return;
    }
    if (limited) {
      send(
        429,
        JSON.stringify({
          error: {
            type: 'invalid_request_error',
            code: 'rate_limit',
            message:
              'Request rate limit exceeded. Learn more about rate limits here https://stripe.com/docs/rate-limits.',
          },
        }),
      );
      return;
    }
    const failure = faults.takeFailure(method, url.pathname);
    if (failure) {
      send(failure.status, JSON.stringify(failure.body));
      return;
    }
    if (req.headers.authorization !== `Bearer ${secretKey}`) {
      send(
        401,
        JSON.stringify({
          error: {
            type: 'invalid_request_error',
            message: `Invalid API Key provided: ${String(req.headers.authorization ?? '').slice(7, 15)}****`,
          },
        }),
      );
      return;
    }

    const requestFingerprint = fingerprint(method, url.pathname, body);
    if (method === 'POST' && idempotencyKey) {
      const replay = this.idempotency.replay(idempotencyKey, requestFingerprint);
      if (replay) {
        send(replay.status, replay.body, replay.headers);
        return;
      }
    }

    let status = 200;
    let payload: string;
    try {
      const route = routes.match(method, url.pathname);
      if (!route)
        throw new StripeApiError(
          404,
          'invalid_request_error',
          `Unrecognized request URL (${method}: ${url.pathname}).`,
        );
      const input = method === 'POST' ? body : query;
      const result = route.handler({ params: route.params, query, body: input });
      const expand = (input.expand as string[] | undefined) ?? [];
      payload = JSON.stringify(expandIds(clone(result), expand, (id) => routes.lookup(id)));
    } catch (err) {
      // A bug in the fake answers 500, as Stripe's own api_error would, rather than leaving the
      // client waiting for an answer that never comes.
      const apiError =
        err instanceof StripeApiError
          ? err
          : new StripeApiError(
              500,
              'api_error',
              `The fake failed: ${err instanceof Error ? err.message : String(err)}`,
            );
      status = apiError.status;
      payload = JSON.stringify(apiError.toBody());
    }
    if (method === 'POST' && idempotencyKey) this.idempotency.save(idempotencyKey, requestFingerprint, status, payload);
    send(status, payload);
  }
}

/** Replaces ids by objects along each `expand` path (a.b.c), the way Stripe's expand[] works. */
function expandIds(obj: Obj, paths: string[], lookup: (id: string) => Obj | undefined): Obj {
  for (const path of paths) {
    const walk = (node: any, segments: string[]): any => {
      if (segments.length === 0 || node == null) return node;
      const [head, ...rest] = segments as [string, ...string[]];
      if (Array.isArray(node)) return node.map((n) => walk(n, segments));
      let value = node[head];
      if (typeof value === 'string') value = lookup(value) ?? value;
      node[head] = typeof value === 'object' && value !== null ? walk(clone(value), rest) : value;
      return node;
    };
    walk(obj, path.split('.'));
  }
  return obj;
}
