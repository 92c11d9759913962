import type { Config } from '../../config.js';
import { hashTag, redisKey } from '../../infra/redis.js';
import { randomIdPart } from '../../ids.js';

// What a worker publishes to the web process holding the client's connection. One message is
// `<requestId>|<seq>|<kind>|<payload>`: the web tier checks the sequence and writes the payload as is, with
// no JSON parse on the hot path.
//
// Every message a worker publishes is also appended, in the same script call, to the request's relay
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

export function encodeRelay(requestId: string, seq: number, kind: RelayKind, payload = ''): string {
  return `${requestId}|${seq}|${CODE[kind]}|${payload}`;
}

export interface RelayMessage {
  seq: number;
  kind: RelayKind;
  payload: string;
}

/** The request a message is for, and the message (undefined when it cannot be read). */
export function decodeRelay(message: string): { requestId: string; message: RelayMessage | undefined } {
  const r = message.indexOf('|');
  const requestId = r < 0 ? '' : message.slice(0, r);
  const a = message.indexOf('|', r + 1);
  if (r < 1 || a < r + 2 || message[a + 2] !== '|') return { requestId, message: undefined };
  const kind = KIND[message[a + 1]!];
  const seq = Number(message.slice(r + 1, a));
  if (!kind || kind === 'usage' || !Number.isInteger(seq)) return { requestId, message: undefined };
  return { requestId, message: { seq, kind, payload: message.slice(a + 3) } };
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
  /**
   * The wire format's own ending of a stream that had started (a Responses stream's
   * response.failed, which carries the usage): numbered events the web tier writes instead of its
   * own error event. Absent, the web tier frames the error (sse.ts).
   */
  events?: string;
}

// Keys and channels. Everything about one request's relay (its log, its state, the channel it is
// published on) carries the hash tag of the web process holding its client: the worker's relay call and
// claim script then touch one slot, and on a Redis Cluster each web process's traffic stays on the
// one shard that owns its channel.
const webTag = (prefix: string, relayTo: string): string => hashTag(prefix, `w.${relayTo}`);

/** The web process's one channel (sharded pub/sub): every message names its request. */
export const relayChannel = (prefix: string, relayTo: string): string =>
  redisKey(prefix, 'relay', webTag(prefix, relayTo));
export const relayLogKey = (prefix: string, relayTo: string, requestId: string): string =>
  redisKey(prefix, 'rlog', webTag(prefix, relayTo), requestId);
/**
 * How long a running request's state and log live unless renewed: three times the upstream
 * timeout (at least three minutes), so a stream that is still going never loses them.
 */
export const runningTtlSeconds = (config: Pick<Config, 'providers'>): number =>
  Math.ceil(Math.max(config.providers.requestTimeoutMs / 1000, 60) * 3);

/**
 * A request's state and log lifetimes: while it runs (the claim sets it, the worker's renewals
 * keep it) and once it has ended. The one place both are derived, so a renewal never shortens
 * what the claim set.
 */
export const relayTtls = (
  config: Pick<Config, 'providers'> & { queue: Pick<Config['queue'], 'relayLogTtlSeconds'> },
): { runningSeconds: number; endedSeconds: number } => ({
  runningSeconds: runningTtlSeconds(config),
  endedSeconds: config.queue.relayLogTtlSeconds,
});

/** Who runs the request, whether its usage is recorded, who may read it back and who reads it. */
/** The field of a request's state a stalled worker's watchdog sets (see run-job.ts, take-over). */
export const STALLED_FIELD = 'stalled';

/**
 * The request state's field where the web process holding the client acknowledges the last relay
 * message it handed to it (relay/acks.ts): a job stopped for that process's death bills by it.
 */
export const ACKED_FIELD = 'acked';

export const requestStateKey = (prefix: string, relayTo: string, requestId: string): string =>
  redisKey(prefix, 'req', webTag(prefix, relayTo), requestId);
/** The leases of a request's resumed readers, beside its state (see readers.ts). */
export const readerLeasesKey = (prefix: string, relayTo: string, requestId: string): string =>
  redisKey(prefix, 'readers', webTag(prefix, relayTo), requestId);
/** A worker process's one cancellation channel: a message is the id of a request to stop, or a detach notice. */
export const cancelChannel = (prefix: string, workerId: string): string =>
  redisKey(prefix, 'cancel', hashTag(prefix, `k.${workerId}`));

/**
 * On a worker's cancel channel: a reader of a resumable request left (its client went away). The
 * worker stops it only if no reader is back within the grace period. A bare request id still
 * means "stop now".
 */
export const detachNotice = (requestId: string): string => `d|${requestId}`;
export const detachedRequest = (message: string): string | undefined =>
  message.startsWith('d|') ? message.slice(2) : undefined;

/** The request state's field counting a web process's readers of the request (resumable requests). */
export const READER_FIELD_PREFIX = 'r.';
export const readerField = (instance: string): string => `${READER_FIELD_PREFIX}${instance}`;

// A completion id names the web process that took the request: its relay log and state carry that
// process's hash tag, so any web process finds them from the id alone (a resumed stream, a
// retrieval), with no index key to write per request. Ids stay OpenAI's `chatcmpl-` (`resp_` for
// the Responses API) plus 24 URL-safe characters: the 8 of the web process's instance name, then
// 16 random ones.
export const INSTANCE_LENGTH = 8;
const COMPLETION_ID = new RegExp(`^(?:chatcmpl-|resp_)([A-Za-z0-9_-]{${INSTANCE_LENGTH}})[A-Za-z0-9_-]{16}$`);

export function completionId(instance: string): string {
  if (instance.length !== INSTANCE_LENGTH)
    throw new Error(`a web process instance name has ${INSTANCE_LENGTH} characters, not '${instance}'`);
  return `chatcmpl-${instance}${randomIdPart(12)}`;
}

/** A Responses API request's id (`resp_…`), naming the web process that took it as a completion id does. */
export function responseId(instance: string): string {
  if (instance.length !== INSTANCE_LENGTH)
    throw new Error(`a web process instance name has ${INSTANCE_LENGTH} characters, not '${instance}'`);
  return `resp_${instance}${randomIdPart(12)}`;
}

/** The web process that took the request with this id (undefined: not an id this service made). */
export const originOf = (id: string): string | undefined => COMPLETION_ID.exec(id)?.[1];

/**
 * Where one request's relay goes: the web process's channel, the relay log, the request's state.
 * All three carry the web process's hash tag, so a MULTI or script over them touches one slot.
 */
export interface RelayTarget {
  requestId: string;
  channel: string;
  logKey: string;
  stateKey: string;
}

export function relayTarget(prefix: string, relayTo: string, requestId: string): RelayTarget {
  return {
    requestId,
    channel: relayChannel(prefix, relayTo),
    logKey: relayLogKey(prefix, relayTo, requestId),
    stateKey: requestStateKey(prefix, relayTo, requestId),
  };
}

export interface RelayTtls {
  /** How long a running request's log and state live without being touched (renewed as it runs). */
  runningSeconds: number;
  /** How long they are kept once the request has ended (a late reader, a resumed stream). */
  endedSeconds: number;
}
