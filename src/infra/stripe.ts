import Stripe from 'stripe';
import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import type { StripeMetrics } from '../metrics.js';
import { pacedHttpClient, type HttpClient, type StripePacer } from './stripe-pacing.js';

export type { Stripe };

/**
 * The Stripe client of a process, or undefined when STRIPE_SECRET_KEY is not set. With a pacer,
 * every call waits for its turn under the deployment-wide STRIPE_MAX_OPS_PER_SECOND; with
 * metrics, every answer is counted by status.
 */
export function createStripe(
  config: Config,
  opts: { pacer?: StripePacer; metrics?: StripeMetrics } = {},
): Stripe | undefined {
  const { secretKey, apiBase, timeoutMs, maxNetworkRetries } = config.stripe;
  if (secretKey === undefined) return undefined;
  const base = apiBase === undefined ? undefined : new URL(apiBase);
  const counted = opts.metrics ? countedHttpClient(opts.metrics) : undefined;
  const httpClient = opts.pacer ? pacedHttpClient(opts.pacer, counted) : counted;
  return new Stripe(secretKey, {
    timeout: timeoutMs,
    maxNetworkRetries,
    ...(httpClient ? { httpClient } : {}),
    appInfo: { name: 'completions-service', version: '1.0.0' },
    ...(base
      ? {
          host: base.hostname,
          protocol: base.protocol === 'http:' ? 'http' : 'https',
          port: base.port !== '' ? Number(base.port) : base.protocol === 'http:' ? 80 : 443,
        }
      : {}),
  });
}

/**
 * Stripe's own Node HTTP client, counting each request's answer by status, or `unreachable` when
 * none came. Counted beneath the SDK's retries and the pacer's resends, so each attempt counts.
 */
function countedHttpClient(metrics: StripeMetrics): HttpClient {
  const inner = Stripe.createNodeHttpClient();
  return new (class extends Stripe.HttpClient {
    override getClientName(): string {
      return inner.getClientName();
    }
    override async makeRequest(...args: Parameters<HttpClient['makeRequest']>) {
      let res: Awaited<ReturnType<HttpClient['makeRequest']>>;
      try {
        res = await inner.makeRequest(...args);
      } catch (err) {
        metrics.requests.inc({ status: 'unreachable' });
        throw err;
      }
      metrics.requests.inc({ status: String(res.getStatusCode()) });
      return res;
    }
  })();
}

export const stripeConfigured = (config: Pick<Config, 'stripe'>): boolean => config.stripe.secretKey !== undefined;

/**
 * Verifies a webhook's Stripe-Signature against the exact request bytes. Needs only the webhook
 * secret (no API key), so a server without STRIPE_SECRET_KEY still rejects forged events.
 * `receivedAtMs` comes from the injected clock; the signature's timestamp must be within
 * Stripe's default tolerance of it, which bounds replay of a captured request.
 */
export function verifyWebhookEvent(
  payload: string,
  signature: string,
  secret: string,
  receivedAtMs: number,
): Stripe.Event {
  return Stripe.webhooks.constructEvent(payload, signature, secret, undefined, undefined, receivedAtMs);
}

export const isStripeError = (err: unknown): err is Stripe.errors.StripeError =>
  err instanceof Stripe.errors.StripeError;

/** A Stripe "No such …" answer to a retrieve of an id the caller gave us. */
/** Stripe answered 429: too many calls for its rate limit (the deployment's, shared by every process). */
export const isStripeRateLimit = (err: unknown): boolean =>
  err instanceof Stripe.errors.StripeRateLimitError ||
  (err instanceof AppError && err.cause instanceof Stripe.errors.StripeRateLimitError);

export const isResourceMissing = (err: unknown): boolean => isStripeError(err) && err.code === 'resource_missing';

/**
 * Stripe's failures in the service's words: unreachable or timing out -> 503, Stripe's own 5xx
 * -> 502, a declined card -> 402, a rejected request -> 502 (the request was ours, so the fault
 * is on our side of the conversation, not the client's). Nothing was changed locally when any of
 * these is thrown, because every local write happens after the Stripe calls succeed.
 */
export function stripeFailure(err: unknown, doing: string): AppError {
  if (err instanceof AppError) return err;
  if (!isStripeError(err)) {
    return new AppError('upstream', `Unexpected failure while ${doing} with the payment processor`, {
      code: 'payment_processor_error',
      cause: err,
    });
  }
  const requestId = err.requestId ? ` (Stripe request ${err.requestId})` : '';
  if (err instanceof Stripe.errors.StripeConnectionError) {
    return new AppError(
      'unavailable',
      `The payment processor did not answer in time while ${doing}; nothing was changed. Please retry.`,
      {
        code: 'payment_processor_unavailable',
        headers: { 'Retry-After': '5' },
        cause: err,
      },
    );
  }
  if (err instanceof Stripe.errors.StripeRateLimitError) {
    return new AppError(
      'unavailable',
      `The payment processor is busy (rate limited) while ${doing}; nothing was changed. Please retry shortly.`,
      {
        code: 'payment_processor_busy',
        headers: { 'Retry-After': '5' },
        cause: err,
      },
    );
  }
  if (err instanceof Stripe.errors.StripeCardError) {
    return new AppError('invalid_request', `The card was declined while ${doing}: ${err.message}`, {
      status: 402,
      code: err.code ?? 'card_declined',
      cause: err,
    });
  }
  if (err instanceof Stripe.errors.StripeAuthenticationError || err instanceof Stripe.errors.StripePermissionError) {
    return new AppError(
      'unavailable',
      `The payment processor refused this server's credentials while ${doing}; billing is misconfigured.`,
      {
        code: 'billing_misconfigured',
        cause: err,
      },
    );
  }
  if (err instanceof Stripe.errors.StripeAPIError) {
    return new AppError(
      'upstream',
      `The payment processor failed while ${doing}${requestId}; nothing was changed. Please retry.`,
      {
        code: 'payment_processor_error',
        cause: err,
      },
    );
  }
  return new AppError(
    'upstream',
    `The payment processor rejected a request while ${doing}${requestId}: ${err.message}`,
    {
      code: 'payment_processor_rejected',
      cause: err,
    },
  );
}

/** Runs one Stripe call, turning its failure into the service's error. */
export async function callStripe<T>(doing: string, call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw stripeFailure(err, doing);
  }
}
