// Redis memory that requests leave behind once they have ended: the keys a batch of requests
// created (the key names under the prefix after it, less those before), measured with MEMORY USAGE
// and multiplied by how long each kind of key lives. One Redis server (MEMORY USAGE and INFO are
// per node), as the benchmark runs.
import type { Redis } from 'ioredis';

/** A kind of per-request key: what it is, how to tell it by name, how long it lives once the request ended. */
export interface KeyKind {
  name: string;
  match: RegExp;
  ttlSeconds: number;
}

export interface KindFigures {
  name: string;
  /** Keys of this kind the batch left, per request. */
  keysPerRequest: number;
  /** Mean MEMORY USAGE (key, value and its entry in the keyspace) of the sampled keys. */
  bytesPerKey: number;
  /** keysPerRequest × bytesPerKey. */
  bytesPerRequest: number;
  /** How long the key lives once its request ended (configured). */
  ttlSeconds: number;
  /** Mean remaining TTL of the sampled keys when measured, a check on ttlSeconds. */
  observedTtlSeconds: number;
}

export interface RequestKeyFigures {
  requests: number;
  kinds: KindFigures[];
  /** New keys of no known kind, by the shape of their name (ids replaced by `*`, the prefix kept), with their count. */
  otherKeys: Record<string, number>;
  /** INFO used_memory after the batch less before, per request: what the keyspace grew by, with the expiry entries MEMORY USAGE leaves out. */
  usedMemoryPerRequest: number;
}

async function keyNames(redis: Redis, prefix: string): Promise<Set<string>> {
  const keys = new Set<string>();
  let cursor = '0';
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 1000);
    cursor = next;
    for (const k of batch) keys.add(k);
  } while (cursor !== '0');
  return keys;
}

async function usedMemory(redis: Redis): Promise<number> {
  return Number(/used_memory:(\d+)/.exec(await redis.info('memory'))?.[1]);
}

/** A key name with its ids (completion ids, long runs of hex and dashes, numbers) replaced by `*`. */
export function keyShape(key: string): string {
  return key.replace(/chatcmpl-[\w-]+/g, 'chatcmpl-*').replace(/[0-9a-f][0-9a-f-]{7,}|\d+/gi, '*');
}

const mean = (xs: number[]) => (xs.length === 0 ? NaN : xs.reduce((a, b) => a + b, 0) / xs.length);

/**
 * Runs `batch` (which sends requests and resolves, once every one has ended, with how many it
 * sent) and measures the keys under `prefix` it left, MEMORY USAGE on up to `sample` of each kind.
 * Nothing else may be writing under `prefix` meanwhile.
 */
export async function measureRequestKeys(
  redis: Redis,
  prefix: string,
  kinds: KeyKind[],
  batch: () => Promise<number>,
  sample = 100,
): Promise<RequestKeyFigures> {
  const before = await keyNames(redis, prefix);
  const memoryBefore = await usedMemory(redis);
  const requests = await batch();
  const memoryAfter = await usedMemory(redis);
  const created = [...(await keyNames(redis, prefix))].filter((k) => !before.has(k));
  const otherKeys: Record<string, number> = {};
  const figures: KindFigures[] = [];
  for (const kind of kinds) {
    const keys = created.filter((k) => kind.match.test(k));
    const sampled = keys.slice(0, sample);
    const pipeline = redis.pipeline();
    for (const k of sampled) pipeline.call('MEMORY', 'USAGE', k, 'SAMPLES', '0').pttl(k);
    const replies = ((await pipeline.exec()) ?? []).map(([, v]) => Number(v));
    const bytes = replies.filter((_, i) => i % 2 === 0);
    const ttls = replies.filter((ms, i) => i % 2 === 1 && ms > 0).map((ms) => ms / 1000);
    const keysPerRequest = keys.length / Math.max(1, requests);
    figures.push({
      name: kind.name,
      keysPerRequest,
      bytesPerKey: mean(bytes),
      bytesPerRequest: keysPerRequest * (mean(bytes) || 0),
      ttlSeconds: kind.ttlSeconds,
      observedTtlSeconds: mean(ttls),
    });
  }
  for (const k of created) {
    if (kinds.some((kind) => kind.match.test(k))) continue;
    // The prefix may hold digits, here and in hash tags: kept as it is.
    const shape = keyShape(k.replaceAll(prefix, '\0')).replaceAll('\0', prefix);
    otherKeys[shape] = (otherKeys[shape] ?? 0) + 1;
  }
  return {
    requests,
    kinds: figures,
    otherKeys,
    usedMemoryPerRequest: (memoryAfter - memoryBefore) / Math.max(1, requests),
  };
}

/** Bytes held in Redis at a sustained `requestsPerSecond`: every kind of key, times how long it lives. */
export function steadyStateBytes(kinds: KindFigures[], requestsPerSecond: number): number {
  return requestsPerSecond * kinds.reduce((sum, k) => sum + k.bytesPerRequest * k.ttlSeconds, 0);
}
