import type { RedisClient } from '../infra/redis.js';
import { kindOf, logEntryId, seqOfLogEntry, type LogKind } from './relay-protocol.js';
import { eventData } from './sse.js';

export interface LogEntry {
  seq: number;
  kind: LogKind;
  payload: string;
}

/** The request's relay log from `fromSeq` on, in order. */
export async function readRelayLog(redis: RedisClient, key: string, fromSeq = 0): Promise<LogEntry[]> {
  const rows = (await redis.xrange(key, logEntryId(fromSeq), '+')) as [string, string[]][];
  const entries: LogEntry[] = [];
  for (const [id, fields] of rows) {
    let kind: LogKind | undefined;
    let payload = '';
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (fields[i] === 'k') kind = kindOf(fields[i + 1]!);
      else if (fields[i] === 'p') payload = fields[i + 1]!;
    }
    if (kind) entries.push({ seq: seqOfLogEntry(id), kind, payload });
  }
  return entries;
}

/**
 * The text of each choice as the client was sent it, from the SSE events in the log: what an
 * interrupted stream is billed for. `choices` is the request's n.
 */
export function deliveredText(entries: readonly LogEntry[], choices: number): string[] {
  const text = Array.from({ length: choices }, () => '');
  for (const e of entries) {
    if (e.kind !== 'sse') continue;
    for (const data of eventData(e.payload)) {
      const chunk = JSON.parse(data) as { choices?: { index: number; delta?: { content?: string } }[] };
      for (const c of chunk.choices ?? []) if (c.delta?.content && c.index < choices) text[c.index] += c.delta.content;
    }
  }
  return text;
}
