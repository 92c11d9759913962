import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Cluster, Redis } from 'ioredis';
import { freePort } from './private-redis.js';

const run = promisify(execFile);

interface Node {
  port: number;
  dir: string;
  proc: ChildProcess | undefined;
}

/**
 * A Redis Cluster of its own on loopback ports: three masters and, optionally, a replica each
 * (so a killed master fails over), made with Debian's redis-server in cluster mode and
 * `redis-cli --cluster create`, torn down with stop().
 */
export class LocalRedisCluster {
  private nodes: Node[] = [];
  private root = '';

  constructor(private readonly opts: { masters?: number; replicas?: number } = {}) {}

  async start(): Promise<this> {
    const masters = this.opts.masters ?? 3;
    const replicas = this.opts.replicas ?? 0;
    this.root = await mkdtemp(path.join(os.tmpdir(), 'svc-cluster-'));
    for (let i = 0; i < masters * (1 + replicas); i++) {
      const port = await freePort();
      this.nodes.push({ port, dir: path.join(this.root, String(port)), proc: undefined });
    }
    await Promise.all(this.nodes.map((n) => this.startNode(n)));
    const hosts = this.nodes.map((n) => `127.0.0.1:${n.port}`);
    await run('redis-cli', ['--cluster', 'create', ...hosts, '--cluster-replicas', String(replicas), '--cluster-yes']);
    await this.waitUntilHealthy();
    if (replicas > 0) await this.waitForReplicas(masters * replicas);
    return this;
  }

  /** Replicas join after the create command returns: a failover needs them attached and in sync. */
  private async waitForReplicas(expected: number, timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let synced = 0;
      for (const n of this.nodes) {
        const r = new Redis(n.port, '127.0.0.1', {
          lazyConnect: true,
          maxRetriesPerRequest: 0,
          retryStrategy: () => null,
        });
        r.on('error', () => undefined);
        try {
          await r.connect();
          const info = await r.info('replication');
          if (info.includes('role:slave') && info.includes('master_link_status:up')) synced++;
        } catch {
          // not up yet
        } finally {
          r.disconnect();
        }
      }
      if (synced >= expected) return;
      if (Date.now() > deadline) throw new Error(`only ${synced} of ${expected} cluster replicas are in sync`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** The seed list for REDIS_CLUSTER_NODES. */
  get seeds(): string {
    return this.nodes.map((n) => `127.0.0.1:${n.port}`).join(',');
  }

  get ports(): number[] {
    return this.nodes.map((n) => n.port);
  }

  /** A client on the cluster, for a test's own checks. */
  client(): Cluster {
    return new Cluster(this.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })));
  }

  /** The port of the master serving `key`'s slot. */
  async masterOf(key: string): Promise<number> {
    const c = this.client();
    try {
      const slot = Number(await c.call('CLUSTER', 'KEYSLOT', key));
      const slots = (await c.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
      const range = slots.find(([from, to]) => slot >= from && slot <= to);
      if (!range) throw new Error(`no master for slot ${slot}`);
      return range[2][1];
    } finally {
      c.disconnect();
    }
  }

  /** SIGKILL the node on `port`: with a replica, the cluster fails its slots over to it. */
  async kill(port: number): Promise<void> {
    const node = this.nodes.find((n) => n.port === port);
    if (!node?.proc) return;
    const exited = new Promise<void>((r) => node.proc!.once('exit', () => r()));
    node.proc.kill('SIGKILL');
    await exited;
    node.proc = undefined;
  }

  /** Resolves once every slot is served by a live master and every live node says the cluster is ok. */
  async waitUntilHealthy(timeoutMs = 30_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    const livePorts = () => new Set(this.nodes.filter((n) => n.proc).map((n) => n.port));
    for (;;) {
      const alive = this.nodes.filter((n) => n.proc);
      const states = await Promise.all(
        alive.map(async (n) => {
          const r = new Redis(n.port, '127.0.0.1', {
            lazyConnect: true,
            maxRetriesPerRequest: 0,
            retryStrategy: () => null,
          });
          r.on('error', () => undefined);
          try {
            await r.connect();
            const info = String(await r.call('CLUSTER', 'INFO'));
            const slots = (await r.call('CLUSTER', 'SLOTS')) as [number, number, [string, number]][];
            // A node that has not noticed a dead master yet still lists it: not healthy yet.
            const mastersAlive = slots.every(([, , master]) => livePorts().has(Number(master[1])));
            return mastersAlive ? info : '';
          } catch {
            return '';
          } finally {
            r.disconnect();
          }
        }),
      );
      if (states.every((s) => s.includes('cluster_state:ok') && s.includes('cluster_slots_ok:16384'))) return;
      if (Date.now() > deadline)
        throw new Error(`the local Redis Cluster did not become healthy:\n${states.join('\n')}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => (n.proc ? this.kill(n.port) : Promise.resolve())));
    if (this.root) await rm(this.root, { recursive: true, force: true });
  }

  private async startNode(n: Node): Promise<void> {
    await run('mkdir', ['-p', n.dir]);
    n.proc = spawn(
      'redis-server',
      [
        '--port',
        String(n.port),
        '--bind',
        '127.0.0.1',
        '--dir',
        n.dir,
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        'nodes.conf',
        '--cluster-node-timeout',
        '1000',
        '--appendonly',
        'yes',
        '--save',
        '',
        '--logfile',
        '',
      ],
      { stdio: 'ignore' },
    );
    const deadline = Date.now() + 10_000;
    for (;;) {
      const r = new Redis(n.port, '127.0.0.1', {
        lazyConnect: true,
        maxRetriesPerRequest: 0,
        retryStrategy: () => null,
      });
      r.on('error', () => undefined);
      try {
        await r.connect();
        if ((await r.ping()) === 'PONG') return;
      } catch {
        if (Date.now() > deadline) throw new Error(`cluster node ${n.port} did not start`);
      } finally {
        r.disconnect();
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** KEYS over the whole keyspace: on a cluster every master holds a part of it, and KEYS sent to the client reaches one. */
export async function keysEverywhere(client: Redis | Cluster, pattern: string): Promise<string[]> {
  const nodes = client instanceof Cluster ? client.nodes('master') : [client];
  return (await Promise.all(nodes.map((n) => n.keys(pattern)))).flat();
}
