import { expect } from 'chai';
import { readFleet } from '../../src/chat/relay/liveness.js';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { freePort } from '../support/private-redis.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';

// Two web and two worker processes on one Redis (or, in the cluster part of the suite, one Redis
// Cluster with three shards): the deployment the design is for, where operators scale each tier
// on its own.
describe('a fleet of two web and two worker processes', () => {
  const prefix = isolatedPrefix();
  // Every process's clock stands at one instant, so a burst never straddles a rate-limit window.
  const env = {
    REDIS_PREFIX: prefix,
    TEST_CLOCK_AT: new Date().toISOString(),
    WORKER_CONCURRENCY: '20',
    LOCAL_MODEL_TTFT_MS: '0',
  };
  let app: AppContext;
  let webs: RoleProcess[];
  let workers: RoleProcess[];
  let metricsPorts: number[];

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    metricsPorts = [await freePort(), await freePort()];
    [webs, workers] = await Promise.all([
      Promise.all([startRole('web', env), startRole('web', env)]),
      Promise.all(
        metricsPorts.map((port) =>
          startRole('worker', { ...env, LOCAL_MODEL_TOKENS_PER_SECOND: '40', WORKER_METRICS_PORT: String(port) }),
        ),
      ),
    ]);
  });
  after(async () => {
    await Promise.all([...(webs ?? []), ...(workers ?? [])].map((p) => p.stop()));
    await app?.close();
  });

  const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 20 };

  /** Completed jobs a worker counted on its /metrics. */
  const completedBy = async (port: number): Promise<number> => {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    return Number(/^completion_jobs_finished_total\{outcome="completed"[^}]*\} (\d+)/m.exec(text)?.[1] ?? 0);
  };

  it('serves streams admitted by either web process on both workers, each billed once', async () => {
    const { apiKey, account } = await createTestAccount(app, { tier: 'paid' });
    const before = await Promise.all(metricsPorts.map(completedBy));
    // Thirty streams at once where each worker takes twenty at most: both must serve some.
    const streams = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        postStream(`${webs[i % 2]!.url}/v1/chat/completions`, { ...ask, stream: true }, apiKey),
      ),
    );
    for (const s of streams) {
      expect(s.status).to.equal(200);
      expect(s.events.at(-1)).to.equal('[DONE]');
    }
    // A worker counts a job once it has recorded it, which is after the client's stream has ended.
    const served = await eventually(async () => {
      const now = (await Promise.all(metricsPorts.map(completedBy))).map((n, i) => n - before[i]!);
      return now[0]! + now[1]! >= 30 ? now : undefined;
    }, 'both workers to count the thirty jobs');
    expect(served[0]! + served[1]!).to.equal(30);
    expect(served[0]).to.be.above(0);
    expect(served[1]).to.be.above(0);
    const ids = streams.map((s) => (JSON.parse(s.events[0]!) as { id: string }).id);
    const rows = await eventually(async () => {
      const r = await app.db
        .selectFrom('usage_events')
        .select('request_id')
        .where('account_id', '=', account.id)
        .execute();
      return r.length >= 30 ? r : undefined;
    }, 'the thirty requests in the ledger');
    expect(rows.map((r) => r.request_id).sort()).to.deep.equal([...ids].sort());
  });

  it('admits exactly the free tier’s 20 requests a minute of 30 sent at once through both web processes', async () => {
    const { apiKey } = await createTestAccount(app, { tier: 'free' });
    // The web processes refuse a burst while the workers' registry says they are busy (503,
    // server_overloaded), and the registry lags by up to a heartbeat: an earlier test's jobs must
    // be gone from it, or this burst is measured against their capacity instead of the limits.
    await eventually(
      async () => ((await readFleet(app.redis, prefix, Date.now())).active === 0 ? true : undefined),
      'both workers idle in the registry',
    );
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) => post(`${webs[i % 2]!.url}/v1/chat/completions`, ask, { bearer: apiKey })),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).to.deep.equal([...Array<number>(20).fill(200), ...Array<number>(10).fill(429)]);
  });

  it('refuses a regenerated key at once on both web processes, even where it was cached', async () => {
    const { apiKey, jwt } = await createTestAccount(app, { tier: 'paid' });
    // Two requests on each web process: the second is admitted from the process's key cache.
    for (const web of webs)
      for (let i = 0; i < 2; i++)
        expect((await post(`${web.url}/v1/chat/completions`, ask, { bearer: apiKey })).status).to.equal(200);
    const regenerated = await post(`${webs[0]!.url}/v1/auth/regenerate-api-key`, {}, { bearer: jwt });
    expect(regenerated.status).to.equal(200);
    for (const web of webs) {
      const old = await post(`${web.url}/v1/chat/completions`, ask, { bearer: apiKey });
      expect(old.status).to.equal(401);
      expect(old.body.error.code).to.equal('invalid_api_key');
      expect((await post(`${web.url}/v1/chat/completions`, ask, { bearer: regenerated.body.api_key })).status).to.equal(
        200,
      );
    }
  });
});
