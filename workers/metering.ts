import type { AppContext } from '../src/context.js';
import type { BackgroundService } from '../src/lifecycle.js';
import { drainUsageOnce, ensureMeteringGroups } from '../src/usage/metering.service.js';
import { dependencyOf } from '../src/infra/outage.js';

/** Drains the usage streams into the ledger continuously; each worker replica is one consumer of each stream's group. */
export async function startMetering(app: AppContext): Promise<BackgroundService> {
  // A blocking read holds its connection, so metering has one of its own.
  const redis = app.redisConnection('queue-worker', 'metering');
  await ensureMeteringGroups(redis, app.config);
  let running = true;
  const loop = (async () => {
    while (running) {
      try {
        await drainUsageOnce(app, redis, { blockMs: 1000 });
        app.outages.postgres.recovered();
      } catch (err) {
        if (!running) break;
        const dependency = dependencyOf(err);
        if (dependency === 'Postgres') app.outages.postgres.failure('metering', err);
        else if (dependency === 'Redis') app.outages.redis.failure('metering', err);
        else app.log.error({ err }, 'metering batch failed; retrying');
        await new Promise((r) => setTimeout(r, 1000));
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
