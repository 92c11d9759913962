import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig, uniqueEmail } from '../support/env.js';
import { get, post, type HttpResult } from '../support/http.js';
import { captureLogs } from '../support/log-capture.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

describe('every endpoint while Postgres is unreachable', () => {
  let proxy: TcpProxy;
  let web: TestWeb;
  let app: AppContext;
  let who: TestAccount;
  const { logger, lines } = captureLogs('info');

  before(async () => {
    const pg = new URL(process.env.DATABASE_URL!);
    proxy = await new TcpProxy(pg.hostname, Number(pg.port || 5432)).start();
    const via = new URL(process.env.DATABASE_URL!);
    via.hostname = '127.0.0.1';
    via.port = String(proxy.port);
    web = await startTestWeb({ logger, env: { DATABASE_URL: via.toString(), REDIS_PREFIX: isolatedPrefix() } });
    app = createContext(testConfig(), { role: 'test' });
    who = await createTestAccount(app, { tier: 'paid' });
    await proxy.cut();
  });
  after(async () => {
    await proxy.restore();
    await web.close();
    await proxy.cut();
    await app.close();
  });

  const expectOutage = (r: HttpResult, what: string) => {
    expect(r.status, `${what}: ${r.text}`).to.equal(503);
    expect(r.headers.get('retry-after'), what).to.equal('5');
    expect(r.body.error, what).to.include({ type: 'service_unavailable', code: 'service_unavailable' });
  };

  it('answers sign-up with 503 and Retry-After, not 500', async () => {
    expectOutage(
      await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email: uniqueEmail('pgdown'), organization: 'E' }),
      'sign-up',
    );
  });

  it('answers a key this process has not cached yet with 503, on every endpoint that takes one', async () => {
    expectOutage(await get(`${web.url}/v1/billing/usage`, { bearer: who.apiKey }), 'usage');
    expectOutage(await get(`${web.url}/v1/models`, { bearer: who.apiKey }), 'models');
    expectOutage(
      await post(
        `${web.url}/v1/chat/completions`,
        { model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'hi' }] },
        { bearer: who.apiKey },
      ),
      'chat',
    );
  });

  it('answers a JWT endpoint with 503', async () => {
    expectOutage(await get(`${web.url}/v1/subscription/info`, { bearer: who.jwt }), 'subscription info');
    expectOutage(await get(`${web.url}/v1/billing/history`, { bearer: who.jwt }), 'billing history');
  });

  it('answers verification with 503', async () => {
    expectOutage(await get(`${web.url}/v1/auth/verify?token=${'a'.repeat(43)}`), 'verify');
  });

  it('logs the outage as warnings, never as an error with a stack', () => {
    expect(lines.filter((l) => l.level >= 50)).to.deep.equal([]);
  });
});
