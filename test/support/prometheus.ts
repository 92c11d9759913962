import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { stringify } from 'yaml';
import { eventually } from './http.js';
import { freePort } from './private-redis.js';

type Tool = 'prometheus' | 'promtool';
const OVERRIDE: Record<Tool, string> = { prometheus: 'PROMETHEUS_PATH', promtool: 'PROMTOOL_PATH' };

/**
 * Debian's Prometheus server or its promtool (both in the `prometheus` package), or an error saying
 * how to get them: a test that needs one fails with that reason, it is never skipped. `npm test`
 * installs the package itself where it runs as root with apt-get (scripts/lib/setup.mjs).
 */
export function prometheusTool(tool: Tool): string {
  const override = process.env[OVERRIDE[tool]];
  const places = override
    ? [override]
    : [
        `/usr/bin/${tool}`,
        ...(process.env.PATH ?? '')
          .split(path.delimiter)
          .filter(Boolean)
          .map((dir) => path.join(dir, tool)),
      ];
  const found = places.find((p) => existsSync(p));
  if (found) return found;
  const where = override ? `${OVERRIDE[tool]} (${override})` : '/usr/bin or the PATH';
  throw new Error(
    `this test needs ${tool}, not found in ${where}: install Prometheus (apt-get install prometheus, or a release from prometheus.io) or set ${OVERRIDE[tool]} to the binary`,
  );
}

/** Runs promtool; its exit status and everything it printed. */
export function promtool(args: string[], cwd?: string): { status: number | null; output: string } {
  const r = spawnSync(prometheusTool('promtool'), args, { cwd, encoding: 'utf8', timeout: 30_000 });
  if (r.error) throw r.error;
  return { status: r.status, output: `${r.stdout}${r.stderr}` };
}

/** One sample of an instant query. */
export interface Sample {
  metric: Record<string, string>;
  value: [number, string];
}

const running = new Set<PrivatePrometheus>();

/** Stops every Prometheus a test started and did not stop (a failed before hook): no process outlives the run. */
export async function stopAllPrometheus(): Promise<void> {
  await Promise.all([...running].map((p) => p.stop()));
}

/**
 * A Prometheus server of a test's own: the given configuration (as an object, written as YAML),
 * storage in a temporary directory, the web API on a free loopback port. Logs are kept for
 * failure reports (output()).
 */
export class PrivatePrometheus {
  private readonly dir = mkdtempSync(path.join(os.tmpdir(), 'svc-prometheus-'));
  private proc: ChildProcess | undefined;
  private log = '';
  url = '';

  constructor(private readonly config: object) {}

  async start(): Promise<this> {
    const bin = prometheusTool('prometheus');
    const port = await freePort();
    this.url = `http://127.0.0.1:${port}`;
    const file = path.join(this.dir, 'prometheus.yml');
    writeFileSync(file, stringify(this.config));
    const proc = spawn(
      bin,
      [
        `--config.file=${file}`,
        `--storage.tsdb.path=${path.join(this.dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    this.proc = proc;
    running.add(this);
    proc.stdout?.on('data', (d: Buffer) => (this.log += d.toString()));
    proc.stderr?.on('data', (d: Buffer) => (this.log += d.toString()));
    const exited = new Promise<never>((_, reject) =>
      proc.once('exit', (code) =>
        reject(new Error(`Prometheus exited with ${code} before it was ready:\n${this.log}`)),
      ),
    );
    exited.catch(() => undefined);
    const ready = eventually(
      async () => ((await fetch(`${this.url}/-/ready`)).ok ? true : undefined),
      'Prometheus to be ready',
      20_000,
    );
    await Promise.race([exited, ready.catch((err: Error) => Promise.reject(new Error(`${err.message}\n${this.log}`)))]);
    return this;
  }

  /** GET on the HTTP API (`/api/v1/...`): its `data`, or an error with Prometheus's own. */
  async api<T>(pathAndQuery: string): Promise<T> {
    const res = await fetch(`${this.url}/api/v1/${pathAndQuery}`);
    const body = (await res.json()) as { status: string; data: T; error?: string };
    if (body.status !== 'success') throw new Error(`Prometheus ${pathAndQuery}: ${body.error ?? res.status}`);
    return body.data;
  }

  /** An instant query's samples. */
  async query(expr: string): Promise<Sample[]> {
    return (await this.api<{ result: Sample[] }>(`query?query=${encodeURIComponent(expr)}`)).result;
  }

  output(): string {
    return this.log;
  }

  async stop(): Promise<void> {
    const proc = this.proc;
    this.proc = undefined;
    running.delete(this);
    if (proc && proc.exitCode === null && proc.signalCode === null) {
      const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
      proc.kill('SIGTERM');
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    }
    await rm(this.dir, { recursive: true, force: true });
  }
}
