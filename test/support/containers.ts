// The service's image (Containerfile) built and run with podman, as an operator would, against
// the test run's Postgres and Redis: the host's network (`--network host`), so a container reaches
// them and the tests reach it on loopback ports. The base image is made from Debian's packages
// (scripts/container/build-base-image.sh), so neither the build nor the tests need a registry.
import { execFile, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { randomId } from './env.js';

const run = promisify(execFile);

export const BASE_IMAGE = 'localhost/chat-api-base:trixie';
export const RUNTIME_IMAGE = 'localhost/chat-api-runtime:trixie';
export const IMAGE = 'localhost/chat-api:test';

/**
 * Flags every `podman run` and `podman build` gets. runc where it is installed: crun refuses the
 * cgroup v1/v2 hybrid some CI machines have. Explicit limits: a container may not inherit the host's
 * (runc then fails to set them), and a web tier needs more open files than the usual 1024.
 */
export function runtimeFlags(): string[] {
  const runc = ['/usr/sbin/runc', '/usr/bin/runc'].find(existsSync);
  return [...(runc ? ['--runtime', runc] : []), '--ulimit', 'nofile=20000:20000', '--ulimit', 'nproc=8192:8192'];
}

export async function podman(args: string[], timeoutMs = 120_000): Promise<{ stdout: string; stderr: string }> {
  return run('podman', args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 });
}

/** Whether podman is here at all: `npm test` installs it where it can (scripts/lib/setup.mjs). */
export function havePodman(): boolean {
  return spawnSync('podman', ['--version']).status === 0;
}

/** The CA bundle the build hands npm, for a registry behind a proxy that re-signs TLS. */
const CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/**
 * Builds the bases (once per machine) and the image from this checkout, and says how long the
 * image took: from a warm cache only the layers whose inputs changed are built again.
 */
export async function buildImage(): Promise<{ buildMs: number }> {
  await run('sh', [path.resolve('scripts/container/build-base-image.sh'), BASE_IMAGE, RUNTIME_IMAGE], {
    timeout: 15 * 60_000,
    maxBuffer: 64 * 1024 * 1024,
  });
  const flags = [
    ...runtimeFlags(),
    '--format',
    'docker',
    '--network',
    'host',
    ...(existsSync(CA_BUNDLE) ? ['--secret', `id=npm-ca,src=${CA_BUNDLE}`] : []),
    '--build-arg',
    `BASE_IMAGE=${BASE_IMAGE}`,
    '--build-arg',
    `RUNTIME_IMAGE=${RUNTIME_IMAGE}`,
  ];
  const started = performance.now();
  await podman(['build', ...flags, '--tag', IMAGE, '.'], 15 * 60_000);
  const buildMs = performance.now() - started;
  // Each build leaves its build stage behind, untagged: the stage of this one is tagged (from the
  // cache, at once), so the layers the next build reuses stay and the older stages can go.
  await podman(['build', ...flags, '--target', 'build', '--tag', `${IMAGE}-build`, '.'], 15 * 60_000);
  // Housekeeping only: an image still held by a container outside the test (an interrupted
  // build's) is left, and the run goes on.
  await podman(['image', 'prune', '--force']).catch(() => undefined);
  return { buildMs };
}

export interface Container {
  name: string;
  /** Sends a signal to the container's PID 1 (tini, which passes it to Node). */
  kill(signal: string): Promise<void>;
  /** Waits for it to exit; its exit code. */
  wait(): Promise<number>;
  logs(): Promise<string>;
  remove(): Promise<void>;
}

const started = new Set<string>();

/** Starts `role` of the image, detached, on the host's network, with `env` on top of the image's. */
export async function startContainer(role: string, env: Record<string, string>): Promise<Container> {
  const name = `chat-api-test-${role}-${randomId(4)}`;
  const envFlags = Object.entries(env).flatMap(([k, v]) => ['--env', `${k}=${v}`]);
  started.add(name);
  await podman(['run', '--detach', '--name', name, '--network', 'host', ...runtimeFlags(), ...envFlags, IMAGE, role]);
  return {
    name,
    kill: async (signal) => void (await podman(['kill', '--signal', signal, name])),
    wait: async () => Number((await podman(['wait', name], 5 * 60_000)).stdout.trim()),
    logs: async () => {
      const { stdout, stderr } = await podman(['logs', name]);
      return stdout + stderr;
    },
    remove: async () => {
      started.delete(name);
      await podman(['rm', '--force', '--time', '0', name]).catch(() => undefined);
    },
  };
}

/** Runs `role` to its exit (migrate); its exit code and output. */
export async function runContainer(
  role: string,
  env: Record<string, string>,
): Promise<{ code: number; output: string }> {
  const c = await startContainer(role, env);
  try {
    const code = await c.wait();
    return { code, output: await c.logs() };
  } finally {
    await c.remove();
  }
}

/** Removes every container this process started and has not removed (a test's teardown). */
export async function removeAllContainers(): Promise<void> {
  await Promise.all(
    [...started].map(async (name) => {
      started.delete(name);
      await podman(['rm', '--force', '--time', '0', name]).catch(() => undefined);
    }),
  );
}
