// One shape for "the caller aborted" across adapters: the SDKs each have their own abort error
// class, and the worker should not need to know them.

/** The error every adapter's stream() rejects with once its signal is aborted. */
export function abortError(): Error {
  const err = new Error('The completion was aborted');
  err.name = 'AbortError';
  return err;
}

/** True for an abort from any adapter (and for Node's and fetch's own AbortError). */
export function isAbortError(err: unknown): boolean {
  return err instanceof Error && err.name === 'AbortError';
}
