import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { HEALTH_CACHE_MS } from '../../src/health/health-views.js';
import { ONE_REDIS_SERVER, OPERATOR_TOKEN } from '../support/env.js';
import { get } from '../support/http.js';
import { PrivateRedis } from '../support/private-redis.js';
import { monitorRedis, type RedisMonitor } from '../support/redis-monitor.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// /health is open to anyone: however many ask, a web process makes one round of checks a second,
// and only the operator sees the checks' details. The web process has a Redis of its own, so every
// PING that Redis sees is a round of /health's checks; the clock is moved by hand.

describe(`/health: one round of checks a second, details for the operator only ${ONE_REDIS_SERVER}`, () => {
  const clock = new ManualClock(Date.now());
  let redis: PrivateRedis;
  let web: TestWeb;
  let monitor: RedisMonitor;
  let pings = 0;

  before(async () => {
    redis = await new PrivateRedis().start();
    web = await startTestWeb({ env: { REDIS_URL: redis.url, ADMIN_TOKEN: OPERATOR_TOKEN }, clock });
    monitor = await monitorRedis(redis.url);
    monitor.on((c) => {
      if (c.args[0]?.toLowerCase() === 'ping') pings++;
    });
  });
  after(async () => {
    monitor?.stop();
    await web?.close();
    await redis?.stop();
  });

  /** The rounds of checks Redis has seen so far: MONITOR reports in order, so a marker seen means every PING before it was. */
  async function roundsSoFar(): Promise<number> {
    const marker = `health-marker-${Math.random()}`;
    const seen = new Promise<void>((resolve) => monitor.on((c) => c.args[1] === marker && resolve()));
    await web.app.redis.get(marker);
    await seen;
    return pings;
  }

  const health = (bearer?: string) => get(`${web.url}/health`, bearer ? { bearer } : {});

  it('answers any number of requests within a second from one round of checks, and checks again after it', async () => {
    clock.advance(HEALTH_CACHE_MS);
    const before = await roundsSoFar();
    const answers = await Promise.all(Array.from({ length: 25 }, () => health()));
    expect(new Set(answers.map((r) => r.status)).size).to.equal(1);
    expect(await roundsSoFar()).to.equal(before + 1);

    clock.advance(HEALTH_CACHE_MS - 1);
    await health(OPERATOR_TOKEN);
    expect(await roundsSoFar()).to.equal(before + 1);

    clock.advance(1);
    await health();
    expect(await roundsSoFar()).to.equal(before + 2);
  });

  it('tells anyone only its status and a reason code, and the operator every check, its error text and the model backend', async () => {
    clock.advance(HEALTH_CACHE_MS);
    // No completion worker runs here: /health is down for want of one.
    for (const bearer of [undefined, 'not-the-operator-token', 'sk-some-api-key']) {
      const r = await health(bearer);
      expect([r.status, r.headers.get('cache-control')]).to.deep.equal([503, 'no-store']);
      expect(r.body).to.deep.equal({ status: 'unavailable', reason: 'no_live_worker' });
    }
    const operator = await health(OPERATOR_TOKEN);
    expect(operator.status).to.equal(503);
    expect(operator.body).to.include({ status: 'unavailable', reason: 'no_live_worker' });
    expect(operator.body.down).to.deep.equal(['workers']);
    expect(operator.body.checks.redis.status).to.equal('ok');
    expect(operator.body.checks.workers.error).to.equal(
      'no live completion worker is registered: completions answer 503 no_worker_available',
    );
    expect(operator.body.info.model_backend).to.be.oneOf(['local', 'catalog']);
  });
});
