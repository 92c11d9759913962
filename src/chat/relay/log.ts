import type { RedisClient } from '../../infra/redis.js';
import type { AnswerUsage } from '../stream/presenters/answer-presenter.js';
import { kindOf, logEntryId, seqOfLogEntry, type LogKind } from './protocol.js';
import { eventData, lastEventIdIn } from '../stream/sse.js';
import {
  newChoice,
  takeDelta,
  takeResponseEvent,
  type ChoiceState,
  type ResponseStreamEvent,
} from '../stream/choices.js';

/** What a stream's worker logs once the upstream has answered in full: a re-run ends the stream with it. */
export interface LoggedUsage {
  usage: AnswerUsage;
  /** The `done` message's payload (the usage chunk, when the client asked for it). */
  done: string;
  /** Of the usage's cache writes, those with the 1-hour TTL (priced apart, and not on the wire). */
  cache_write_1h_tokens?: number;
}

export interface LogEntry {
  seq: number;
  kind: LogKind;
  payload: string;
}

/** Stream entries as Redis gives them (XRANGE, XREAD): [entry id, [field, value, …]]. */
export type LogRows = [string, string[]][];

/** The log's entries in `rows`, each with its stream entry id (where a reader goes on from). */
export function parseLogRows(rows: LogRows): (LogEntry & { entryId: string })[] {
  const entries: (LogEntry & { entryId: string })[] = [];
  for (const [id, fields] of rows) {
    let kind: LogKind | undefined;
    let payload = '';
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (fields[i] === 'k') kind = kindOf(fields[i + 1]!);
      else if (fields[i] === 'p') payload = fields[i + 1]!;
    }
    if (kind) entries.push({ seq: seqOfLogEntry(id), kind, payload, entryId: id });
  }
  return entries;
}

/** The request's relay log from `fromSeq` on, in order. */
export async function readRelayLog(redis: RedisClient, key: string, fromSeq = 0): Promise<LogEntry[]> {
  return parseLogRows(await redis.xrange(key, logEntryId(fromSeq), '+'));
}

/**
 * Each choice as the client was sent it (its text and tool calls), from the SSE events in the log
 * (chat chunks or Responses events): what an interrupted stream is billed for. `choices` is the
 * request's n.
 */
export function deliveredChoices(entries: readonly LogEntry[], choices: number): ChoiceState[] {
  const delivered = Array.from({ length: choices }, newChoice);
  for (const e of entries) {
    if (e.kind !== 'sse') continue;
    for (const data of eventData(e.payload)) {
      const chunk = JSON.parse(data) as {
        choices?: { index: number; delta?: Parameters<typeof takeDelta>[1] }[];
        type?: string;
      };
      // A Responses stream's event (one choice) carries its type; a chat chunk its choices.
      if (chunk.type !== undefined) takeResponseEvent(delivered[0]!, chunk as ResponseStreamEvent);
      for (const c of chunk.choices ?? []) if (c.index < choices) takeDelta(delivered[c.index]!, c.delta);
    }
  }
  return delivered;
}

/** The sequence number of the last SSE event the log holds (0 for none): where a re-run numbers on from. */
export function lastEventIdOf(entries: readonly LogEntry[]): number {
  let last = 0;
  for (const e of entries) {
    if (e.kind !== 'sse' && e.kind !== 'done') continue;
    last = Math.max(last, lastEventIdIn(e.payload) ?? 0);
  }
  return last;
}
