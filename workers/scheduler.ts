import { isMain, runProcess, stopAll, type BackgroundService } from '../src/lifecycle.js';

// The `scheduler` role: node-cron in UTC. Jobs only decide what is due and take a lock, so any
// number of replicas run each job once.
if (isMain(import.meta.url)) {
  runProcess('scheduler', async () => {
    const services: BackgroundService[] = [];
    return { stop: stopAll(services), ready: `scheduler: running ${services.map((s) => s.name).join(', ') || 'no jobs'}` };
  });
}
