import { StripeApiError } from './errors.js';

interface SavedResponse {
  fingerprint: string;
  status: number;
  body: string;
}

export interface Reply {
  status: number;
  body: string;
  headers: Record<string, string>;
}

/**
 * Stripe saves the first response per Idempotency-Key (POST only) and replays it for the same
 * parameters; the same key with other parameters is an idempotency_error.
 */
export class IdempotencyKeys {
  private readonly saved = new Map<string, SavedResponse>();

  /** What a request that repeats a known key gets; undefined for a key not seen yet. */
  replay(key: string, fingerprint: string): Reply | undefined {
    const saved = this.saved.get(key);
    if (!saved) return undefined;
    if (saved.fingerprint === fingerprint)
      return { status: saved.status, body: saved.body, headers: { 'idempotent-replayed': 'true' } };
    const err = new StripeApiError(
      400,
      'idempotency_error',
      `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
    );
    return { status: err.status, body: JSON.stringify(err.toBody()), headers: {} };
  }

  save(key: string, fingerprint: string, status: number, body: string): void {
    this.saved.set(key, { fingerprint, status, body });
  }
}

/** Same method, path and parameters: what makes a repeated key the same request. */
export const fingerprint = (method: string, path: string, body: unknown): string =>
  `${method} ${path} ${JSON.stringify(body)}`;
