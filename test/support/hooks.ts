import { killAllLockHolders } from './lock-holder.js';
import { stopAllPgBouncers } from './private-pgbouncer.js';
import { stopAllPrometheus } from './prometheus.js';
import { stopAllRoles } from './processes.js';

/** Mocha root hooks: whatever a test started as a child process is gone before the run ends. */
export const mochaHooks = {
  async afterAll(): Promise<void> {
    await Promise.all([stopAllRoles(), killAllLockHolders(), stopAllPrometheus()]);
    await stopAllPgBouncers();
  },
};
