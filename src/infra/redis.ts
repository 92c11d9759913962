import calculateSlot from 'cluster-key-slot';
import { Cluster, Redis, type ChainableCommander, type RedisOptions } from 'ioredis';
import type { Config } from '../config.js';
import { loadScriptsWhenReady } from './redis-scripts.js';

/**
 * A connection to the deployment's Redis: one server (REDIS_URL) or a Redis Cluster
 * (REDIS_CLUSTER_NODES). Everything the service does with Redis works on both, because every
 * multi-key command, script and MULTI touches keys of one hash slot (see hashTag below).
 */
export type RedisClient = Redis | Cluster;
export type { ChainableCommander };

/**
 * The roles a Redis connection plays. BullMQ's production guide asks for different settings:
 * a blocking worker connection must retry forever, while anything on a request path must fail
 * fast so a client gets a prompt 503 instead of a hung request. A `blocking` connection serves one
 * blocking read loop (the live tail of a relay log that resumed streams follow) and waits out a
 * reconnect.
 */
export type RedisRole = 'command' | 'subscriber' | 'queue-producer' | 'queue-worker' | 'blocking';

/**
 * Commands that libraries define on a command connection with ioredis's defineCommand:
 * rate-limiter-flexible's counter script (the abuse budget, sign-up limits, Stripe pacing and
 * guards), defined when each limiter is built. An auto-pipeline opened before that does not know
 * the command, and a call put into it breaks the whole pipeline ("results[i] is not iterable").
 */
export const LIBRARY_DEFINED_COMMANDS = ['rlflxIncr'] as const;

/** The longest a connection waits between two reconnect attempts. */
export const RECONNECT_MAX_DELAY_MS = 1000;

const reconnectDelay = (times: number): number => Math.min(100 * 2 ** Math.min(times, 6), RECONNECT_MAX_DELAY_MS);

export function createRedis(config: Config, role: RedisRole, name: string = role): RedisClient {
  const base: RedisOptions = {
    connectionName: `${config.redis.prefix}:${name}`,
    connectTimeout: 3000,
    // Reconnect forever, at least once a second: after a Redis restart every process is back
    // within RECONNECT_MAX_DELAY_MS, which is what liveness checks wait for (see chat/relay/liveness.ts).
    retryStrategy: reconnectDelay,
    lazyConnect: false,
  };
  const byRole: Record<RedisRole, RedisOptions> = {
    command: {
      maxRetriesPerRequest: 1,
      enableOfflineQueue: false,
      commandTimeout: 2000,
      // Auto-pipelining: the commands of one event-loop turn go out in one write. The service's
      // scripts are plain EVALSHA, safe in a pipeline (see redis-scripts.ts); a command a library
      // defines on the connection is not (ioredis issue #1931), so it goes out on its own.
      enableAutoPipelining: true,
      autoPipeliningIgnoredCommands: [...LIBRARY_DEFINED_COMMANDS],
    },
    subscriber: { maxRetriesPerRequest: null, enableOfflineQueue: true },
    'queue-producer': { maxRetriesPerRequest: 1, enableOfflineQueue: false },
    'queue-worker': { maxRetriesPerRequest: null, enableOfflineQueue: true },
    blocking: { maxRetriesPerRequest: null, enableOfflineQueue: true },
  };
  const options = { ...base, ...byRole[role] };
  let client: RedisClient;
  if (config.redis.clusterNodes.length > 0) {
    const {
      retryStrategy: _nodesReconnectThroughTheCluster,
      enableOfflineQueue,
      enableAutoPipelining,
      autoPipeliningIgnoredCommands,
      ...redisOptions
    } = options;
    client = new Cluster(config.redis.clusterNodes, {
      redisOptions,
      enableOfflineQueue,
      enableAutoPipelining,
      ...(autoPipeliningIgnoredCommands ? { autoPipeliningIgnoredCommands } : {}),
      clusterRetryStrategy: reconnectDelay,
      // During a failover a command is retried on the new slot map for a moment before it fails.
      retryDelayOnFailover: 200,
      retryDelayOnClusterDown: 300,
      retryDelayOnTryAgain: 200,
      slotsRefreshTimeout: 2000,
      // ioredis's ready check sends CLUSTER INFO over a node connection that may still be
      // connecting; with the offline queue off it fails at once and the client drops every
      // connection and starts over, which under load kept clients from starting for seconds.
      // whenReady() waits for the node connections instead, and CLUSTERDOWN is retried above.
      enableReadyCheck: false,
      // The relay and cancellation use sharded pub/sub: one subscriber per master, and a message
      // travels only within the shard that owns its channel.
      shardedSubscribers: role === 'subscriber',
    });
  } else {
    client = new Redis(config.redis.url, options);
  }
  // ioredis emits 'error' on every failed reconnect; without a listener Node would crash.
  client.on('error', () => {});
  // The service's scripts run on command connections (see redis-scripts.ts).
  if (role === 'command') loadScriptsWhenReady(client);
  return client;
}

/**
 * Resolves once the client can take commands: for one server, its connection is ready; for a
 * cluster, the slot map is known and every master's connection is ready (commands to a node
 * still connecting would fail, since request paths keep no offline queue).
 */
export async function whenReady(client: RedisClient): Promise<void> {
  const ready = (c: Redis | Cluster) =>
    c.status === 'ready' ? Promise.resolve() : new Promise<void>((resolve) => c.once('ready', () => resolve()));
  await ready(client);
  if (client instanceof Cluster) await Promise.all(client.nodes('master').map(ready));
}

/**
 * Calls `fn` every time a subscriber connection has its subscriptions back after losing them (a
 * Redis restart, a cluster failover): messages published meanwhile are lost to it.
 */
export function onResubscribed(client: RedisClient, fn: () => void): void {
  let first = true;
  const event = client instanceof Cluster ? 'subscribersReady' : 'ready';
  client.on(event, () => {
    if (first) {
      first = false;
      return;
    }
    fn();
  });
  // A cluster's sharded subscribers come back one master at a time; any of them returning counts.
  if (client instanceof Cluster) client.on('+subscriber', () => (first ? undefined : fn()));
}

/**
 * On a Redis Cluster whose master for `key` has replicas: waits (up to `timeoutMs`) until one of
 * them has every write this client made on that master, so the write survives the master's death
 * (replication is otherwise asynchronous, and a failover can lose the last writes). True when a
 * replica confirmed, or when there is none to wait for (one server, or a master without replicas).
 */
export async function replicated(client: RedisClient, key: string, timeoutMs: number): Promise<boolean> {
  if (!(client instanceof Cluster)) return true;
  const owners = client.slots[calculateSlot(key)];
  if (!owners || owners.length < 2) return true;
  const master = client.nodes('master').find((n) => `${n.options.host}:${n.options.port}` === owners[0]);
  if (!master) return false;
  return Number(await master.call('WAIT', 1, timeoutMs)) >= 1;
}

/**
 * How many connections are subscribed to a sharded channel. On a Redis Cluster, summed over the
 * nodes serving the channel's slot (a subscriber may be on a replica).
 */
export async function shardSubscribers(client: RedisClient, channel: string): Promise<number> {
  const count = async (node: Redis) => Number(((await node.call('PUBSUB', 'SHARDNUMSUB', channel)) as unknown[])[1]);
  if (!(client instanceof Cluster)) return count(client);
  const owners = new Set(client.slots[calculateSlot(channel)] ?? []);
  const nodes = client.nodes('all').filter((n) => owners.has(`${n.options.host}:${n.options.port}`));
  // A slot whose nodes are not known yet: counted as subscribed, so nobody is cancelled on a guess.
  if (nodes.length === 0) return 1;
  return (await Promise.all(nodes.map(count))).reduce((a, b) => a + b, 0);
}

/** On a Redis Cluster, calls `fn` when a node is lost, added or failing (a failover under way); never for one server. */
export function onNodeChange(client: RedisClient, fn: () => void): void {
  if (!(client instanceof Cluster)) return;
  for (const event of ['-node', '+node', 'node error']) client.on(event, fn);
}

/** Every key and channel the service uses goes through here, so one prefix isolates a deployment or a test run. */
export function redisKey(prefix: string, ...parts: (string | number)[]): string {
  return [prefix, ...parts].join(':');
}

/**
 * A Redis Cluster hash tag: keys that carry the same tag live in one hash slot, which a script or
 * a MULTI over several keys needs. The deployment's prefix is part of the tag, so two deployments
 * sharing a cluster do not pile onto the same slots.
 */
export function hashTag(prefix: string, name: string): string {
  return `{${prefix}:${name}}`;
}

/**
 * The hash tag of shard `i` of `n` (completion queues, usage streams): chosen so the n shards fall
 * in n equal slot ranges, which a cluster created with even slot ranges places on different
 * masters. Deterministic, so every process computes the same tags.
 */
export function shardTag(prefix: string, i: number, n: number): string {
  const from = Math.floor((i * 16384) / n);
  const to = Math.floor(((i + 1) * 16384) / n);
  for (let k = 0; ; k++) {
    const tag = hashTag(prefix, `s${i}.${k}`);
    const slot = calculateSlot(tag.slice(1, -1));
    if (slot >= from && slot < to) return tag;
  }
}

/** The slot a key lives in (its hash tag's, if it has one). */
export const slotOf = (key: string): number => calculateSlot(key);
