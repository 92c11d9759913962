import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';

/** A free TCP port on loopback (the kernel's choice, released at once). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A Redis server of a test's own, with an append-only file, that the test can kill and start
 * again on the same port and data: a restart as production sees one.
 */
export class PrivateRedis {
  private proc: ChildProcess | undefined;
  private dir = '';
  port = 0;

  async start(): Promise<this> {
    if (!this.dir) {
      this.dir = await mkdtemp(path.join(os.tmpdir(), 'svc-redis-'));
      this.port = await freePort();
    }
    this.proc = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--dir',
        this.dir,
        '--appendonly',
        'yes',
        '--save',
        '',
        '--logfile',
        '',
      ],
      { stdio: 'ignore' },
    );
    await this.waitUntilUp();
    return this;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** SIGKILL: no shutdown, no final save; what the append-only file holds is what comes back. */
  async kill(): Promise<void> {
    const proc = this.proc;
    this.proc = undefined;
    if (!proc || proc.exitCode !== null) return;
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
    proc.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    await this.kill();
    if (this.dir) await rm(this.dir, { recursive: true, force: true });
  }

  private async waitUntilUp(): Promise<void> {
    const deadline = Date.now() + 10_000;
    for (;;) {
      const probe = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      probe.on('error', () => undefined);
      try {
        await probe.connect();
        // Loading the append-only file answers LOADING until it is done.
        if ((await probe.ping()) === 'PONG') return;
      } catch {
        if (Date.now() > deadline) throw new Error(`private Redis on ${this.port} did not start`);
      } finally {
        probe.disconnect();
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}
