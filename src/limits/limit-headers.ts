// Rate-limit response headers, computed from one admission reply (no second look at Redis).

import { retryAdvice } from '../errors.js';

export interface RequestWindow {
  name: 'minute' | 'hour' | 'day';
  limit: number;
  /** Requests counted in the window, including this one when it was admitted. */
  used: number;
  /** Milliseconds until the window rolls over. */
  resetMs: number;
}

export interface TokenQuota {
  limit: number;
  /** Settled tokens today plus every live reservation (including this request's, when admitted). */
  used: number;
  resetMs: number;
}

const remaining = (w: { limit: number; used: number }): number => Math.max(0, w.limit - w.used);

/** Whole seconds, rounded up, so a client that waits this long finds the window rolled over. */
export const ceilSeconds = (ms: number): number => Math.max(1, Math.ceil(ms / 1000));

/**
 * The window "nearest to running out" is the one with the fewest requests left: it is the one that
 * stops the caller first. On a tie the later-resetting window wins, because that is the one the
 * caller actually has to wait for (a spent minute inside a spent hour frees nothing until the hour ends).
 */
export function nearestWindow(windows: RequestWindow[]): RequestWindow {
  let best: RequestWindow | undefined;
  for (const w of windows) {
    if (!best || remaining(w) < remaining(best) || (remaining(w) === remaining(best) && w.resetMs > best.resetMs))
      best = w;
  }
  if (!best) throw new Error('nearestWindow needs at least one window');
  return best;
}

/** OpenAI's duration format for x-ratelimit-reset-*: "1s", "6m0s", "2h3m4s" (whole seconds, rounded up). */
export function openAiDuration(ms: number): string {
  const total = ceilSeconds(ms);
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  if (h > 0) return `${h}h${m}m${s}s`;
  if (m > 0) return `${m}m${s}s`;
  return `${s}s`;
}

export function rateLimitHeaders(
  windows: RequestWindow[],
  tokens: TokenQuota,
  retryAfterMs?: number,
): Record<string, string> {
  const w = nearestWindow(windows);
  const headers: Record<string, string> = {
    'X-RateLimit-Limit': String(w.limit),
    'X-RateLimit-Remaining': String(remaining(w)),
    // Delta-seconds, as in the IETF RateLimit header fields draft (not an epoch timestamp).
    'X-RateLimit-Reset': String(ceilSeconds(w.resetMs)),
    'x-ratelimit-limit-requests': String(w.limit),
    'x-ratelimit-remaining-requests': String(remaining(w)),
    'x-ratelimit-reset-requests': openAiDuration(w.resetMs),
    'x-ratelimit-limit-tokens': String(tokens.limit),
    'x-ratelimit-remaining-tokens': String(remaining(tokens)),
    'x-ratelimit-reset-tokens': openAiDuration(tokens.resetMs),
  };
  return retryAfterMs === undefined ? headers : { ...headers, ...retryAdvice(retryAfterMs) };
}

/**
 * The headers of a limit with one window and no token quota (reading completions back): the
 * window's limit, what is left of it and when it resets, and on a refusal the wait.
 */
export function windowHeaders(
  window: { limit: number; used: number; resetMs: number },
  retryAfterMs?: number,
): Record<string, string> {
  const headers: Record<string, string> = {
    'X-RateLimit-Limit': String(window.limit),
    'X-RateLimit-Remaining': String(remaining(window)),
    'X-RateLimit-Reset': String(ceilSeconds(window.resetMs)),
  };
  return retryAfterMs === undefined ? headers : { ...headers, ...retryAdvice(retryAfterMs) };
}
