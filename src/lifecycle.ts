import { loadConfigOrExit, SHUTDOWN_GRACE_MS, type Config } from './config.js';
import { createContext, type AppContext } from './context.js';
import { startTracing, type Tracing } from './infra/tracing.js';
import { ORPHAN_EXIT_MS, Watchdog } from './infra/watchdog.js';

/** Something a process runs until it is told to stop (a queue worker, a poller, a cron table). */
export interface BackgroundService {
  name: string;
  stop(): Promise<void>;
}

/**
 * The shape of every entry point: load and validate configuration, build the context, start
 * tracing (when configured), start, and on SIGTERM/SIGINT stop what was started, close the
 * context and send the last spans. A second signal forces exit, and so does the shutdown's bound,
 * enforced by the process's watchdog thread even if the event loop blocks meanwhile. The watchdog
 * also stops the process when the supervisor that started it is gone, and ends a worker whose
 * event loop has stalled (see infra/watchdog.ts).
 */
export function runProcess(
  role: string,
  start: (app: AppContext, config: Config, watchdog: Watchdog) => Promise<{ stop(): Promise<void>; ready?: string }>,
): void {
  const config = loadConfigOrExit();
  let shutdown: (signal: string) => void = () => undefined;
  const watchdog = new Watchdog({
    role,
    supervisorPid: config.lifecycle.supervisorPid,
    stallTimeoutMs: role === 'worker' ? config.lifecycle.workerStallTimeoutMs : 0,
    onOrphaned: () => shutdown('supervisor gone'),
  });
  const app = createContext(config, { role });
  const tracing = startTracing(config, role, app.log);
  const flushSpans = () =>
    tracing
      .then((t: Tracing) => t.shutdown())
      .catch((err: unknown) =>
        app.log.warn(
          { reason: err instanceof Error ? err.message : String(err) },
          `${role}: the last spans could not be sent`,
        ),
      );
  let stopper: { stop(): Promise<void> } | undefined;
  let signalled = false;
  shutdown = (signal: string) => {
    if (signalled) {
      app.log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    signalled = true;
    app.log.info({ signal }, `${role}: shutting down`);
    const boundMs = signal === 'supervisor gone' ? ORPHAN_EXIT_MS : config.http.shutdownTimeoutMs + SHUTDOWN_GRACE_MS;
    const forced = setTimeout(() => {
      app.log.error(`${role}: shutdown deadline passed; exiting`);
      process.exit(1);
    }, boundMs);
    forced.unref();
    // Past the bound by a little: the timer above exits with status 1 unless the event loop is blocked.
    watchdog.deadline(boundMs + 500);
    (stopper ? stopper.stop() : Promise.resolve())
      .then(() => app.close())
      .then(flushSpans)
      .then(
        () => process.exit(0),
        (err) => {
          app.log.error({ err }, `${role}: shutdown failed`);
          process.exit(1);
        },
      );
  };
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
  // Fail-fast connections refuse commands until connected: wait (bounded) before starting services.
  // Tracing is registered before any service starts, so no request runs untraced.
  Promise.all([tracing, app.warmUp([app.redis])])
    .then(() => start(app, config, watchdog))
    .then(
      (s) => {
        stopper = s;
        app.log.info({ modelBackend: config.providers.backend }, s.ready ?? `${role}: ready`);
      },
      (err) => {
        process.stderr.write(
          `${role} failed to start: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
        );
        void app
          .close()
          .then(flushSpans)
          .finally(() => process.exit(1));
      },
    );
}

/** Stops services in reverse start order. */
export function stopAll(services: BackgroundService[]): () => Promise<void> {
  return async () => {
    for (const s of [...services].reverse()) await s.stop();
  };
}

/** True when this module is the file Node was asked to run. */
export function isMain(importMetaUrl: string): boolean {
  return process.argv[1] !== undefined && importMetaUrl === new URL(`file://${process.argv[1]}`).href;
}
