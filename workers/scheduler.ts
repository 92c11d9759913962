import { isMain, runProcess, stopAll, type BackgroundService } from '../src/lifecycle.js';
import { startMetricsServer } from '../src/metrics-server.js';
import { startScheduler, type ScheduledWork } from '../src/scheduler/scheduler.service.js';
import { SCHEDULED_QUEUE } from '../src/infra/queues.js';

// The `scheduler` role: node-cron in UTC decides what is due and hands it to the workers through
// the scheduled-work queue; any number of replicas hand a period over once, and missed periods
// are caught up at start.
if (isMain(import.meta.url)) {
  runProcess('scheduler', async (app, config) => {
    const services: BackgroundService[] = [];
    if (config.scheduler.metricsPort !== undefined)
      services.push(await startMetricsServer(app, config.scheduler.metricsPort));
    const scheduler = startScheduler({
      queue: app.queue<ScheduledWork>(SCHEDULED_QUEUE),
      clock: app.clock,
      log: app.log,
      config,
      metrics: app.metrics,
    });
    services.push(scheduler);
    return { stop: stopAll(services), ready: `scheduler: running ${scheduler.jobs.join(', ')}` };
  });
}
