import { loadConfigOrExit, SHUTDOWN_GRACE_MS, type Config } from './config.js';
import { createContext, type AppContext } from './context.js';
import { startTracing, type Tracing } from './infra/tracing.js';

/** Something a process runs until it is told to stop (a queue worker, a poller, a cron table). */
export interface BackgroundService {
  name: string;
  stop(): Promise<void>;
}

/**
 * The shape of every entry point: load and validate configuration, build the context, start
 * tracing (when configured), start, and on SIGTERM/SIGINT stop what was started, close the
 * context and send the last spans. A second signal forces exit.
 */
export function runProcess(
  role: string,
  start: (app: AppContext, config: Config) => Promise<{ stop(): Promise<void>; ready?: string }>,
): void {
  const config = loadConfigOrExit();
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
  const shutdown = (signal: string) => {
    if (signalled) {
      app.log.warn({ signal }, 'second signal: exiting now');
      process.exit(1);
    }
    signalled = true;
    app.log.info({ signal }, `${role}: shutting down`);
    const forced = setTimeout(() => {
      app.log.error(`${role}: shutdown deadline passed; exiting`);
      process.exit(1);
    }, config.http.shutdownTimeoutMs + SHUTDOWN_GRACE_MS);
    forced.unref();
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
    .then(() => start(app, config))
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
