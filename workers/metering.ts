import { sleep } from '../src/clock.js';
import type { AppContext } from '../src/context.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { drainUsageOnce, ensureMeteringGroups } from '../src/usage/metering.service.js';
import { dependencyOf } from '../src/infra/outage.js';

/** The pause after a pass that found entries: about the longest a ledger row waits to gather a batch. */
const BATCH_WINDOW_MS = 100;
/** Entries per stream and pass; a pass that fills it starts the next at once. */
const BATCH_MAX = 500;

/** Drains the usage streams into the ledger continuously; each worker replica is one consumer of each stream's group. */
export async function startMetering(app: AppContext): Promise<BackgroundService> {
  // A blocking read holds its connection, so metering has one of its own.
  const redis = app.redisConnection('queue-worker', 'metering');
  await ensureMeteringGroups(redis, app.config);
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        const drained = await drainUsageOnce(app, redis, { blockMs: 1000, count: BATCH_MAX });
        app.outages.postgres.recovered();
        // A busy service puts a few entries on the stream between two passes: read back to back,
        // each pass pays its reads, one insert (and the totals' statement triggers) and one
        // acknowledgement for those few. Waiting out the window lets them gather into one batch.
        if (drained > 0 && drained < BATCH_MAX) await sleep(BATCH_WINDOW_MS);
      } catch (err) {
        if (!running) break;
        const dependency = dependencyOf(err);
        if (dependency === 'Postgres') app.outages.postgres.failure('metering', err);
        else if (dependency === 'Redis') app.outages.redis.failure('metering', err);
        else app.log.error({ err }, 'metering batch failed; retrying');
        await sleep(1000);
      }
    }
  })();
  return {
    name: 'metering',
    async stop() {
      running = false;
      // The blocking read returns within its 1 s block; then the loop ends.
      await loop;
    },
  };
}
