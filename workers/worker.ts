import { isMain, runProcess, stopAll, type BackgroundService } from '../src/lifecycle.js';
import { startMetricsServer } from '../src/metrics-server.js';
import { startCompletionWorker } from './completion.js';
import { startEmailSender } from './email-sender.js';
import { startInvoicingWork } from './invoicing.js';
import { startMetering } from './metering.js';
import { startScheduledWork } from './scheduled.js';

// The `worker` role: everything that drains a queue. Each replica runs the same set; BullMQ and
// row locks share the work between replicas.
if (isMain(import.meta.url)) {
  runProcess('worker', async (app, config, watchdog) => {
    const services: BackgroundService[] = [];
    if (config.worker.metricsPort !== undefined)
      services.push(await startMetricsServer(app, config.worker.metricsPort));
    services.push(await startCompletionWorker(app, watchdog));
    services.push(await startMetering(app));
    services.push(startEmailSender(app));
    services.push(await startScheduledWork(app));
    services.push(await startInvoicingWork(app));
    return {
      stop: stopAll(services),
      ready: `worker: running ${services.map((s) => s.name).join(', ') || 'no services'}`,
    };
  });
}
