import { AppError, retryAdvice } from '../../errors.js';
import { ProviderError } from '../../providers/types.js';
import type { RelayError } from '../relay/protocol.js';
import { NOTHING } from './billable.js';
import type { JobEnd } from './settle.js';

// The errors a completion job can end with, and the one way each reaches its client: as the relay's
// error (the status and the OpenAI-style body the web tier answers with).

export function toRelayError(err: unknown): RelayError {
  if (err instanceof AppError) {
    return {
      status: err.status,
      error: { message: err.message, type: err.type, code: err.code, param: err.param },
      headers: err.headers,
    };
  }
  if (err instanceof ProviderError) {
    // The upstream's own client errors are the caller's (400); its outages are ours to report (502).
    const status =
      err.status === 400 || err.status === 413 || err.status === 422 ? 400 : err.status === 429 ? 503 : 502;
    const code =
      err.status === 429 ? 'upstream_rate_limited' : status === 400 ? 'upstream_rejected_request' : 'upstream_error';
    // A rate-limited upstream says when to come back; pass that on (bounded, see retryAdvice).
    const headers: Record<string, string> = status === 503 ? retryAdvice(err.retryAfterMs ?? 5000) : {};
    return {
      status,
      error: {
        message: `The model provider failed: ${err.message}`,
        type: status === 400 ? 'invalid_request_error' : 'upstream_error',
        code,
        param: null,
      },
      headers,
    };
  }
  return {
    status: 500,
    error: {
      message: 'The completion failed inside the service; please retry.',
      type: 'server_error',
      code: 'internal_error',
      param: null,
    },
  };
}

/** What a client still there is told when its request was stopped: a cut answer is not a whole one. */
export const stoppedError = (): AppError =>
  new AppError('unavailable', 'The completion was stopped before it finished; please retry.', {
    code: 'request_cancelled',
  });

/** A job handed out again long after its request: a client still waiting is told to retry. */
export const expiredError = (): AppError =>
  new AppError('unavailable', 'The request expired before a worker could answer it; please retry.', {
    code: 'request_expired',
  });

/** A job whose worker stalled on it, or that stopped its workers more than once: it is not run again. */
export const stalledError = (stalled: boolean): AppError =>
  new AppError(
    'upstream',
    stalled
      ? 'The worker running this completion stalled on it and was stopped; it is not run again. Please retry, or change the request if it happens again.'
      : 'The workers running this completion stopped more than once before it could be answered; it is not run again. Please retry.',
    { code: 'worker_stalled' },
  );

/** A stream whose worker died after part of its answer: resuming it is not possible, repeating it would garble it. */
export const interruptedError = (): AppError =>
  new AppError(
    'upstream',
    'The worker running this completion stopped before it finished; the partial answer cannot be resumed. Please retry.',
    { code: 'worker_interrupted' },
  );

/** A job whose provider this process does not know (a rolling deploy that added one): as if it were not configured. */
export const unknownProviderError = (model: { id: string; provider: string }): AppError =>
  new AppError(
    'unavailable',
    `Model ${model.id} is unavailable: its provider (${model.provider}) is not configured on this server`,
    { code: 'model_unavailable' },
  );

/** A request that gets no answer: the error to its client, nothing produced, nothing billed. */
export function unanswered(status: 'failed' | 'cancelled', err: unknown): JobEnd {
  const error = toRelayError(err);
  return {
    status,
    message: { kind: 'error', payload: JSON.stringify(error) },
    produced: NOTHING,
    delivered: 'none',
    response: { ended: status, error },
  };
}
