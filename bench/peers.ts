// The reference gateway the benchmark measures the service against: Portkey's open-source AI
// gateway (Node, one process, no accounts, no limits, no ledger), the one a user would pick
// instead of this service for a direct OpenAI-compatible hop. Installed on demand at a pinned
// version into var/bench/peers/ (never a dependency of the service) and pointed at the same fake
// upstream as every other side.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const PORTKEY_VERSION = '1.15.2';

export interface Peer {
  child: ChildProcess;
  url: string;
  /** Headers every request through the peer carries (its routing to the upstream). */
  headers: Record<string, string>;
}

function ensurePortkey(root: string): string {
  const dir = path.join(root, 'var', 'bench', 'peers', `portkey-${PORTKEY_VERSION}`);
  const entry = path.join(dir, 'node_modules', '@portkey-ai', 'gateway', 'build', 'start-server.js');
  if (existsSync(entry)) return entry;
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({ private: true, description: 'benchmark peer, installed by bench/peers.ts' }),
  );
  process.stderr.write(`bench: installing @portkey-ai/gateway@${PORTKEY_VERSION} into ${dir}\n`);
  const r = spawnSync(
    'npm',
    ['install', '--no-audit', '--no-fund', '--save-exact', `@portkey-ai/gateway@${PORTKEY_VERSION}`],
    { cwd: dir, stdio: ['ignore', 'ignore', 'inherit'] },
  );
  if (r.status !== 0 || !existsSync(entry))
    throw new Error(`could not install @portkey-ai/gateway@${PORTKEY_VERSION} (npm exited with ${r.status})`);
  return entry;
}

async function waitForHttp(url: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the peer at ${url} exited with ${child.exitCode}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    if (performance.now() > deadline) throw new Error(`the peer at ${url} did not answer within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Starts Portkey's gateway on `port`, routing every request to the OpenAI-compatible `upstreamBaseUrl`. */
export async function startPortkey(root: string, upstreamBaseUrl: string, port: number): Promise<Peer> {
  const entry = ensurePortkey(root);
  const preload = path.join(root, 'bench', 'peers', 'portkey-preload.cjs');
  // production + --headless: no log console, no UI routes, as it would be deployed.
  const child = spawn(process.execPath, ['--require', preload, entry, `--port=${port}`, '--headless'], {
    env: { PATH: process.env.PATH, NODE_ENV: 'production' },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(url, child, 30_000);
  return { child, url, headers: { 'x-portkey-provider': 'openai', 'x-portkey-custom-host': upstreamBaseUrl } };
}
