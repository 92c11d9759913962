import { once } from 'node:events';
import type { RoleProcess } from './processes.js';

/** NODE_OPTIONS that make a child process report, at exit, the OpenTelemetry packages it loaded. */
export function reportingLoadedPackages(): string {
  return `${process.env.NODE_OPTIONS ?? ''} --import=${new URL('./report-loaded-packages.js', import.meta.url).href}`.trim();
}

/** The OpenTelemetry packages a process started with reportingLoadedPackages() loaded; stops it gracefully first. */
export async function loadedPackagesOf(p: RoleProcess): Promise<string[]> {
  await p.stop();
  // 'exit' can come before the last output: wait for the stream's end.
  const stderr = p.proc.stderr!;
  if (!stderr.closed) await once(stderr, 'close');
  const line = p
    .output()
    .split('\n')
    .find((l) => l.startsWith('loaded-opentelemetry-packages: '));
  if (line === undefined) throw new Error(`${p.role} did not report its loaded packages:\n${p.output().slice(-2000)}`);
  return JSON.parse(line.slice('loaded-opentelemetry-packages: '.length)) as string[];
}
