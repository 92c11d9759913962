import { isMain, runProcess, stopAll, type BackgroundService } from '../src/lifecycle.js';
import { startMetricsServer } from '../src/metrics-server.js';
import { startScheduler } from '../src/scheduler/scheduler.service.js';

// The `scheduler` role: node-cron in UTC. Jobs only decide what is due and take a claim, so any
// number of replicas run each job's period once; missed periods are caught up at start.
if (isMain(import.meta.url)) {
  runProcess('scheduler', async (app, config) => {
    const services: BackgroundService[] = [];
    if (config.scheduler.metricsPort !== undefined) services.push(await startMetricsServer(app, config.scheduler.metricsPort));
    const scheduler = startScheduler(app);
    services.push(scheduler);
    return { stop: stopAll(services), ready: `scheduler: running ${scheduler.jobs.join(', ')}` };
  });
}
