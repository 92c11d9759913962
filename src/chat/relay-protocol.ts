// What a worker publishes to the web process holding the client's connection. One message is
// `<seq>|<kind>|<payload>`: the web tier checks the sequence and writes the payload as is, with
// no JSON parse on the hot path. A gap in `seq` means a lost pub/sub message: the stream ends
// with an error instead of silently missing text.

export type RelayKind =
  /** A worker took the job (payload empty). Always seq 0. */
  | 'picked'
  /** Ready-to-write SSE bytes: one or more `data: {chunk}\n\n` events. */
  | 'sse'
  /** Non-streaming answer: the whole chat.completion JSON body. */
  | 'final'
  /** The request failed: JSON {status, error: {message, type, code, param}}. */
  | 'error'
  /** The stream is complete (payload empty); `data: [DONE]` follows on the web side. */
  | 'done';

const CODE: Record<RelayKind, string> = { picked: 'p', sse: 's', final: 'f', error: 'e', done: 'd' };
const KIND: Record<string, RelayKind> = { p: 'picked', s: 'sse', f: 'final', e: 'error', d: 'done' };

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
  if (!kind || !Number.isInteger(seq)) return undefined;
  return { seq, kind, payload: message.slice(a + 3) };
}

export interface RelayError {
  status: number;
  error: { message: string; type: string; code: string | null; param: string | null };
  /** Headers the client should get with it (Retry-After). */
  headers?: Record<string, string>;
}

/** Matches the web process's pattern subscription (see RelayHub). */
export const relayChannel = (prefix: string, relayTo: string, requestId: string): string => `${prefix}:relay:${relayTo}:${requestId}`;
export const cancelChannel = (prefix: string, requestId: string): string => `${prefix}:cancel:${requestId}`;
export const cancelPattern = (prefix: string): string => `${prefix}:cancel:*`;
