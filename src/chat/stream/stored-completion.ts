import type { RedisClient } from '../../infra/redis.js';
import type { LoggedUsage } from '../relay/log.js';
import { parseLogRows, type LogEntry, type LogRows } from '../relay/log.js';
import { originOf, relayLogKey, requestStateKey, type RelayError } from '../relay/protocol.js';
import { eventData } from './sse.js';
import { messageOf, newChoice, takeDelta, type ChoiceState } from './choices.js';

// A finished completion, read back from its relay log while the log is kept (RELAY_LOG_TTL_SECONDS
// after the end): OpenAI's stored-completion retrieval. A non-streaming answer is the logged body
// itself; a stream's is put together from its chunks and the usage its worker logged beside them,
// so both answers read exactly as a non-streaming client would have had them.

export type StoredCompletion =
  /** The chat.completion body, as JSON text. */
  | { status: 'completed'; body: string }
  | { status: 'running' }
  /** It ended without a whole answer (cancelled, failed): the error it ended with. */
  | { status: 'failed'; error: RelayError };

interface Chunk {
  id: string;
  created: number;
  model: string;
  system_fingerprint?: string;
  choices?: { index: number; delta?: Parameters<typeof takeDelta>[1]; finish_reason?: string | null }[];
  usage?: LoggedUsage['usage'] | null;
}

/** The chat.completion a whole stream amounts to. */
function completionOfStream(entries: readonly LogEntry[]): string {
  let head: Chunk | undefined;
  const choices: ChoiceState[] = [];
  let usage: LoggedUsage['usage'] | undefined;
  for (const e of entries) {
    if (e.kind === 'usage') usage = (JSON.parse(e.payload) as LoggedUsage).usage;
    if (e.kind !== 'sse' && e.kind !== 'done') continue;
    for (const data of eventData(e.payload)) {
      const chunk = JSON.parse(data) as Chunk;
      head ??= chunk;
      if (chunk.usage) usage ??= chunk.usage;
      for (const c of chunk.choices ?? []) {
        const choice = (choices[c.index] ??= newChoice());
        takeDelta(choice, c.delta);
        if (c.finish_reason) choice.finish = c.finish_reason;
      }
    }
  }
  if (!head || !usage) throw new Error('a completed stream without chunks or usage in its relay log');
  return JSON.stringify({
    id: head.id,
    object: 'chat.completion',
    created: head.created,
    model: head.model,
    ...(head.system_fingerprint === undefined ? {} : { system_fingerprint: head.system_fingerprint }),
    choices: Array.from(choices, (c, index) => ({
      index,
      message: messageOf(c ?? newChoice()),
      logprobs: null,
      finish_reason: c?.finish ?? 'stop',
    })),
    usage,
  });
}

/**
 * The completion `requestId` of `accountId`: undefined when there is none (an id this service did
 * not make, another account's, or one whose log has expired). One round trip.
 */
export async function findCompletion(
  redis: RedisClient,
  prefix: string,
  accountId: string,
  requestId: string,
): Promise<StoredCompletion | undefined> {
  const origin = originOf(requestId);
  if (origin === undefined) return undefined;
  // The state and the log share a slot (the origin web process's hash tag): one MULTI reads both.
  const replies =
    (await redis
      .multi()
      .hget(requestStateKey(prefix, origin, requestId), 'account')
      .xrange(relayLogKey(prefix, origin, requestId), '-', '+')
      .exec()) ?? [];
  const [[accountErr, owner] = [null, null], [logErr, rows] = [null, []]] = replies;
  if (accountErr) throw accountErr;
  if (logErr) throw logErr;
  if (owner !== accountId) return undefined;
  const entries = parseLogRows(rows as LogRows);
  const end = entries.find((e) => e.kind === 'final' || e.kind === 'done' || e.kind === 'error');
  if (!end) return { status: 'running' };
  if (end.kind === 'final') return { status: 'completed', body: end.payload };
  if (end.kind === 'error') return { status: 'failed', error: JSON.parse(end.payload) as RelayError };
  return { status: 'completed', body: completionOfStream(entries) };
}
