// What a failed call to Postgres or Redis looks like when the server cannot be reached, as
// opposed to a query or command that is wrong. The web edge answers the first kind with 503 and
// Retry-After (a client can come back), never 500.

const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);

// Postgres SQLSTATEs: class 08 (connection exception), shutting down or starting up, too many connections.
const PG_UNAVAILABLE = /^(08...|57P01|57P02|57P03|53300)$/;

const MESSAGES = [
  // pg
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Client has encountered a connection error',
  // ioredis
  'Connection is closed',
  "Stream isn't writeable",
  'Reached the max retries per request limit',
  'Command timed out',
];

/** True when `err` (or its cause) says Postgres or Redis could not be reached. */
export function isDependencyDown(err: unknown, depth = 0): boolean {
  if (!err || typeof err !== 'object' || depth > 3) return false;
  const e = err as { code?: unknown; message?: unknown; name?: unknown; cause?: unknown; errors?: unknown };
  if (typeof e.code === 'string' && (NETWORK_CODES.has(e.code) || PG_UNAVAILABLE.test(e.code))) return true;
  if (e.name === 'MaxRetriesPerRequestError') return true;
  if (typeof e.message === 'string' && MESSAGES.some((m) => (e.message as string).includes(m))) return true;
  // Node's AggregateError (a connect to several addresses) and errors wrapping a cause.
  if (Array.isArray(e.errors) && e.errors.some((x) => isDependencyDown(x, depth + 1))) return true;
  return isDependencyDown(e.cause, depth + 1);
}
