import { expect } from 'chai';
import { workerRegistryKey, type WorkerCapacity } from '../../src/chat/relay/liveness.js';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { HEALTH_CACHE_MS } from '../../src/health/health-views.js';
import { isolatedPrefix, OPERATOR_TOKEN, testConfig } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { rolesPerTest, type RoleProcess } from '../support/processes.js';

// /health tells whether a completion can be answered: a live worker is registered and keeps up.

describe('/health and the completion workers', function () {
  this.timeout(60_000);
  const start = rolesPerTest();
  let app: AppContext;
  let account: TestAccount;
  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  /** Registers a worker that is not running, as a live one would renew its entry. */
  const register = (prefix: string, id: string, lagMs: number) => {
    const entry: WorkerCapacity = { concurrency: 4, active: 0, lagMs, until: Date.now() + 60_000 };
    return app.redis.hset(workerRegistryKey(prefix), id, JSON.stringify(entry));
  };
  // As the operator: the checks are what these tests read.
  const health = (web: RoleProcess) => get(`${web.url}/health`, { bearer: OPERATOR_TOKEN });

  it('answers 503 naming workers, with the reason, while no live worker is registered', async () => {
    const web = await start('web', { REDIS_PREFIX: isolatedPrefix(), ADMIN_TOKEN: OPERATOR_TOKEN });
    const r = await health(web);
    expect(r.status).to.equal(503);
    expect(r.body.status).to.equal('unavailable');
    expect(r.body.down).to.deep.equal(['workers']);
    expect(r.body.checks.workers).to.deep.equal({
      status: 'down',
      live: 0,
      max_lag_ms: 1000,
      error: 'no live completion worker is registered: completions answer 503 no_worker_available',
    });
  });

  it('answers 503 when every live worker lags past HEALTH_MAX_EVENT_LOOP_LAG_MS, naming the least lag', async () => {
    const prefix = isolatedPrefix();
    const web = await start('web', { REDIS_PREFIX: prefix, ADMIN_TOKEN: OPERATOR_TOKEN });
    await register(prefix, 'slow-1', 1500);
    await register(prefix, 'slow-2', 4000);
    const r = await health(web);
    expect(r.status).to.equal(503);
    expect(r.body.down).to.deep.equal(['workers']);
    expect(r.body.checks.workers.error).to.equal(
      "every live worker's event loop lags past 1000 ms (the least: 1500 ms)",
    );
    expect(r.body.checks.workers.least_lag_ms).to.equal(1500);
  });

  it('answers 200 while one live worker keeps up, even if another lags', async () => {
    const prefix = isolatedPrefix();
    const web = await start('web', { REDIS_PREFIX: prefix, ADMIN_TOKEN: OPERATOR_TOKEN });
    await register(prefix, 'slow', 4000);
    await register(prefix, 'fine', 20);
    const r = await health(web);
    expect(r.status).to.equal(200);
    expect(r.body.checks.workers).to.deep.equal({ status: 'ok', live: 2, least_lag_ms: 20, max_lag_ms: 1000 });
  });

  it('turns 503 within LIVENESS_TTL_MS once the only worker’s event loop is blocked', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), FAULT_BLOCK_WORKER_USER: 'block-me', WORKER_STALL_TIMEOUT_MS: '0' };
    const [web] = await Promise.all([start('web', { ...env, ADMIN_TOKEN: OPERATOR_TOKEN }), start('worker', env)]);
    const up = await eventually(async () => ((await health(web)).status === 200 ? true : undefined), 'a live worker');
    expect(up).to.equal(true);
    const stuck = post(
      `${web.url}/v1/chat/completions`,
      { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'hi' }], user: 'block-me', stream: true },
      { bearer: account.apiKey, signal: AbortSignal.timeout(20_000) },
    ).catch(() => undefined);
    // The job is claimed (its stream announced `picked`) just before the worker blocks.
    const sentAt = performance.now();
    const down = await eventually(async () => {
      const r = await health(web);
      return r.status === 503 ? r : undefined;
    }, '/health to turn 503');
    const afterMs = performance.now() - sentAt;
    expect(down.body.checks.workers.error).to.match(/no live completion worker/);
    // One TTL (2 s) from the last renewal, plus the age of /health's last round of checks, plus
    // the time for the job to reach the worker.
    expect(afterMs).to.be.below(2000 + HEALTH_CACHE_MS + 1000);
    void stuck;
  });
});
