import { AppError, kindForStatus } from '../../errors.js';
import type { RelayError } from '../relay/protocol.js';

// What a client of a stream (new or resumed) is told when its answer did not come whole.

/** A failure reported by the worker, as the error the client sees: status, type and headers as the worker decided. */
export function relayFailure(e: RelayError): AppError {
  return new AppError(kindForStatus(e.status), e.error.message, {
    status: e.status,
    type: e.error.type,
    code: e.error.code ?? undefined,
    param: e.error.param,
    headers: e.headers ?? {},
  });
}

export const lostRelay = (): AppError =>
  new AppError('upstream', 'Part of the response was lost between the worker and this server; please retry.', {
    code: 'relay_interrupted',
  });

/** The silence limit passed: the client is told the worker stopped answering (`worker_timeout`, public API). */
export const silenceError = (): AppError =>
  new AppError('upstream', 'The worker stopped answering; please retry.', { code: 'worker_timeout' });
