import { createHash } from 'node:crypto';
import { Cluster, Command, type Redis } from 'ioredis';

// redis.ts's RedisClient, named here too: redis.ts loads the scripts on its connections.
type RedisClient = Redis | Cluster;

// The service's Lua scripts, called by SHA only (EVALSHA). Every script is declared once, at module
// load, with redisScript(); a command connection loads them all (SCRIPT LOAD) each time it becomes
// ready, on a Redis Cluster on every node as it connects, so a call after a restart or a failover
// finds its script. A call that meets NOSCRIPT all the same (a server that lost its scripts while
// the client stayed connected, a node promoted before its connection was ready) sends the body
// once with EVAL, which also caches it on that server.
//
// These are plain EVALSHA and EVAL commands, not ioredis's defineCommand: a defined command is
// unknown to an auto-pipeline built before it was defined (ioredis issue #1931), is routed on a
// cluster by its first argument rather than its keys, and sends its whole body the first time on
// every connection.

/** A Lua script the service runs, named by its SHA1. */
export interface RedisScript {
  readonly name: string;
  readonly lua: string;
  readonly sha: string;
}

const declared = new Map<string, RedisScript>();

/** Declares a script: every command connection loads it when it becomes ready. */
export function redisScript(name: string, lua: string): RedisScript {
  const script = { name, lua, sha: createHash('sha1').update(lua).digest('hex') };
  const known = declared.get(name);
  if (known && known.sha !== script.sha) throw new Error(`two Redis scripts are named ${name}`);
  declared.set(name, script);
  return script;
}

export type ScriptArg = string | number;

const noScript = (err: unknown): boolean => err instanceof Error && err.message.startsWith('NOSCRIPT');

/** EVALSHA by `send`, then the body by EVAL once if the server answers NOSCRIPT. */
async function shaThenBody(
  script: RedisScript,
  send: (command: 'evalsha' | 'eval', body: string) => Promise<unknown>,
): Promise<unknown> {
  try {
    return await send('evalsha', script.sha);
  } catch (err) {
    if (!noScript(err)) throw err;
    return send('eval', script.lua);
  }
}

/**
 * Runs `script` on `keys` with `args` (one round trip; two when the server has lost it). A script
 * that writes must be safe to send again after NOSCRIPT, which Redis answers without running it.
 */
export function runScript(
  redis: RedisClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly ScriptArg[] = [],
): Promise<unknown> {
  return shaThenBody(script, (command, body) => redis[command](body, keys.length, ...keys, ...args));
}

/**
 * runScript, written to the connection before this call returns, never held back for an
 * auto-pipeline at the end of the event-loop turn: for a caller whose next step (a write to a
 * client) must come after Redis has the command on its way.
 */
export function runScriptNow(
  redis: RedisClient,
  script: RedisScript,
  keys: readonly string[],
  args: readonly ScriptArg[] = [],
): Promise<unknown> {
  return shaThenBody(
    script,
    (command, body) =>
      redis.sendCommand(
        new Command(command, [body, keys.length, ...keys, ...args], { replyEncoding: 'utf8' }),
      ) as Promise<unknown>,
  );
}

/** Loads every declared script on `node`, in one round trip; a failure is left to NOSCRIPT. */
function loadAll(node: Redis): void {
  const scripts = [...declared.values()];
  if (scripts.length === 0) return;
  node
    .pipeline(scripts.map((s) => ['script', 'load', s.lua]))
    .exec()
    .catch(() => undefined);
}

/**
 * Loads every declared script whenever `client` becomes ready: for one server each time its
 * connection is (re)established, for a cluster each time a node's connection is. Call once, before
 * the client connects.
 */
export function loadScriptsWhenReady(client: RedisClient): void {
  if (client instanceof Cluster) {
    const watch = (node: Redis) => {
      node.on('ready', () => loadAll(node));
      if (node.status === 'ready') loadAll(node);
    };
    client.nodes('all').forEach(watch);
    client.on('+node', watch);
  } else {
    client.on('ready', () => loadAll(client));
  }
}
