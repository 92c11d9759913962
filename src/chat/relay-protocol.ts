// What a worker publishes to the web process holding the client's connection. One message is
// `<seq>|<kind>|<payload>`: the web tier checks the sequence and writes the payload as is, with
// no JSON parse on the hot path.
//
// Every message a worker publishes is also appended, in the same MULTI, to the request's relay
// log (a Redis stream, entry id `<seq + 1>-0`). Pub/sub is fast but forgets: a message lost on
// the way (a Redis restart, a subscriber reconnecting) is read back from the log, so a gap in
// `seq` is filled rather than fatal, and a re-run of a stalled job knows exactly what the client
// was sent (and so what to bill).

export type RelayKind =
  /** A worker took the job (payload empty). Always seq 0. */
  | 'picked'
  /** Ready-to-write SSE bytes: one or more `data: {chunk}\n\n` events. */
  | 'sse'
  /** Non-streaming answer: the whole chat.completion JSON body. */
  | 'final'
  /** The request failed: JSON {status, error: {message, type, code, param}}. */
  | 'error'
  /** The stream is complete; the payload holds any last SSE events (the usage chunk). */
  | 'done';

/** Log-only entries: never published, read by a re-run of the job. */
export type LogKind = RelayKind | 'usage';

const CODE: Record<LogKind, string> = { picked: 'p', sse: 's', final: 'f', error: 'e', done: 'd', usage: 'u' };
const KIND: Record<string, LogKind> = { p: 'picked', s: 'sse', f: 'final', e: 'error', d: 'done', u: 'usage' };

export const kindCode = (kind: LogKind): string => CODE[kind];
export const kindOf = (code: string): LogKind | undefined => KIND[code];

export function encodeRelay(seq: number, kind: RelayKind, payload = ''): string {
  return `${seq}|${CODE[kind]}|${payload}`;
}

export interface RelayMessage {
  seq: number;
  kind: RelayKind;
  payload: string;
}

export function decodeRelay(message: string): RelayMessage | undefined {
  const a = message.indexOf('|');
  if (a < 1 || message[a + 2] !== '|') return undefined;
  const kind = KIND[message[a + 1]!];
  const seq = Number(message.slice(0, a));
  if (!kind || kind === 'usage' || !Number.isInteger(seq)) return undefined;
  return { seq, kind, payload: message.slice(a + 3) };
}

/**
 * The relay log's entry id for a message: stream ids must be above 0-0 and increasing. A log-only
 * note (the upstream's usage) follows the message `seq` it was written after, at `<seq + 1>-1`,
 * without taking a sequence number the web tier would wait for.
 */
export const logEntryId = (seq: number, note = false): string => `${seq + 1}-${note ? 1 : 0}`;
export const seqOfLogEntry = (id: string): number => Number(id.slice(0, id.indexOf('-'))) - 1;

export interface RelayError {
  status: number;
  error: { message: string; type: string; code: string | null; param: string | null };
  /** Headers the client should get with it (Retry-After). */
  headers?: Record<string, string>;
}

/** Matches the web process's pattern subscription (see RelayHub). */
export const relayChannel = (prefix: string, relayTo: string, requestId: string): string => `${prefix}:relay:${relayTo}:${requestId}`;
export const relayLogKey = (prefix: string, requestId: string): string => `${prefix}:rlog:${requestId}`;
/** Who runs the request, and whether its usage is recorded. */
export const requestStateKey = (prefix: string, requestId: string): string => `${prefix}:req:${requestId}`;
export const cancelChannel = (prefix: string, requestId: string): string => `${prefix}:cancel:${requestId}`;
export const cancelPattern = (prefix: string): string => `${prefix}:cancel:*`;
