import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { createContext, type AppContext } from '../../src/context.js';
import { ManualClock } from '../../src/clock.js';
import { AppError } from '../../src/errors.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { TcpProxy } from '../support/tcp-proxy.js';

describe('rate limiter when Redis is unreachable', () => {
  let proxy: TcpProxy;
  let app: AppContext;

  beforeEach(async () => {
    const redisUrl = new URL(process.env.REDIS_URL!);
    proxy = await new TcpProxy(redisUrl.hostname, Number(redisUrl.port || 6379)).start();
    app = createContext(testConfig({ REDIS_URL: proxy.url('redis'), REDIS_PREFIX: isolatedPrefix() }), {
      role: 'web',
      clock: new ManualClock(),
    });
    expect(await app.warmUp([app.redis])).to.equal(true);
  });
  afterEach(async () => {
    await proxy.cut();
    await app.close();
  });

  const chat = (accountId: string) =>
    app.limiter.admit({ accountId, tier: 'free', requestId: randomUUID(), reserveTokens: 100 });

  async function failure(call: () => Promise<unknown>): Promise<{ err: AppError; ms: number }> {
    const started = performance.now();
    try {
      await call();
    } catch (err) {
      expect(err).to.be.instanceOf(AppError);
      return { err: err as AppError, ms: performance.now() - started };
    }
    throw new Error('expected the call to fail');
  }

  it('refuses at once with 503 and Retry-After once the connection is known to be down', async () => {
    const account = randomUUID();
    expect((await chat(account)).allowed).to.equal(true);
    await proxy.cut();
    await eventually(async () => (app.redis.status !== 'ready' ? true : undefined), 'the client to notice the outage');
    const { err, ms } = await failure(() => chat(account));
    expect(err.status).to.equal(503);
    expect(err.headers).to.deep.equal({ 'Retry-After': '5' });
    expect((err.toBody() as { error: { type: string } }).error.type).to.equal('service_unavailable');
    expect(ms).to.be.below(200);
  });

  it('refuses within the command timeout when Redis goes away mid-flight, never admitting', async () => {
    const account = randomUUID();
    await proxy.cut();
    const { err, ms } = await failure(() => chat(account));
    expect(err.status).to.equal(503);
    // The command connection times a command out after 2 s (src/infra/redis.ts).
    expect(ms).to.be.below(2500);
  });

  it('refuses settle and key regeneration with 503 too', async () => {
    await proxy.cut();
    await eventually(async () => (app.redis.status !== 'ready' ? true : undefined), 'the client to notice the outage');
    expect(
      (await failure(() => app.limiter.settle({ accountId: randomUUID(), requestId: randomUUID(), actualTokens: 1 })))
        .err.status,
    ).to.equal(503);
    expect((await failure(() => app.limiter.admitKeyRegeneration(randomUUID()))).err.status).to.equal(503);
  });

  it('admits again once Redis is back', async () => {
    const account = randomUUID();
    await proxy.cut();
    await failure(() => chat(account));
    await proxy.restore();
    const back = await eventually(async () => {
      try {
        return await chat(account);
      } catch {
        return undefined;
      }
    }, 'admission to work again after Redis returns');
    expect(back.allowed).to.equal(true);
  });

  it('counts 503 refusals in the metrics registry', async () => {
    await proxy.cut();
    await failure(() => chat(randomUUID()));
    const metric = await app.metrics.registry.getSingleMetric('rate_limiter_unavailable_total')!.get();
    expect(metric.values[0]!.value).to.be.at.least(1);
  });
});
