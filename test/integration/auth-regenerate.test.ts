import { expect } from 'chai';
import { Redis } from 'ioredis';
import pg from 'pg';
import { ManualClock } from '../../src/clock.js';
import { accountsRoutes } from '../../src/http/routes/accounts.routes.js';
import { keysRoutes } from '../../src/http/routes/keys.routes.js';
import { mintJwt } from '../../src/accounts/jwt.js';
import { subscriptionInfo } from '../../src/subscriptions/subscription-info.service.js';
import { createTestAccount, credentialProbeRoutes } from '../support/accounts.js';
import { randomId } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { PrivateRedis } from '../support/private-redis.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const TWO_HOURS = 2 * 3_600_000;

describe('POST /v1/auth/regenerate-api-key', () => {
  const clock = new ManualClock(Date.now());
  let web: TestWeb;
  const regenerate = (jwt: string) => post(`${web.url}/v1/auth/regenerate-api-key`, undefined, { bearer: jwt });
  const probe = (key: string) => get(`${web.url}/probe/api_key`, { bearer: key });
  const keysOf = (accountId: string) =>
    web.app.db.selectFrom('api_keys').selectAll().where('account_id', '=', accountId).orderBy('created_at').execute();

  before(async () => {
    web = await startTestWeb({ clock, routes: [...accountsRoutes(), ...keysRoutes(), ...credentialProbeRoutes()] });
  });
  after(async () => web.close());

  it('issues a new key that works at once, and the old key stops working at once', async () => {
    const { account, apiKey: oldKey, jwt } = await createTestAccount(web.app);
    expect((await probe(oldKey)).status).to.equal(200);
    const r = await regenerate(jwt);
    expect(r.status).to.equal(200);
    expect(r.headers.get('cache-control')).to.equal('no-store');
    expect(r.headers.get('x-ratelimit-limit')).to.equal('1');
    expect(r.headers.get('x-ratelimit-remaining')).to.equal('0');
    expect(Object.keys(r.body).sort()).to.deep.equal(['api_key', 'email', 'message']);
    expect(r.body.email).to.equal(account.email);
    expect(r.body.api_key)
      .to.match(/^sk-svc-/)
      .and.not.equal(oldKey);
    const old = await probe(oldKey);
    expect(old.status).to.equal(401);
    expect(old.body.error.code).to.equal('invalid_api_key');
    expect((await probe(r.body.api_key)).body.account_id).to.equal(account.id);
  });

  it('replaces only the default key: the account’s other keys keep working, and the new default keeps its settings', async () => {
    const { account, apiKey: oldDefault, jwt } = await createTestAccount(web.app);
    const defaultId = (await get(`${web.url}/v1/keys`, { bearer: jwt })).body.data[0].id;
    await web.app.db
      .updateTable('api_keys')
      .set({ name: 'Main', models: ['gpt-4.1-mini'], requests_per_minute: 7 })
      .where('id', '=', defaultId)
      .execute();
    const second = await post(`${web.url}/v1/keys`, { name: 'Second program' }, { bearer: jwt });
    expect(second.status).to.equal(201);
    expect((await probe(second.body.api_key)).status).to.equal(200);
    const r = await regenerate(jwt);
    expect(r.status).to.equal(200);
    expect((await probe(oldDefault)).status).to.equal(401);
    expect((await probe(r.body.api_key)).status).to.equal(200);
    expect((await probe(second.body.api_key)).status).to.equal(200);
    const listed = (await get(`${web.url}/v1/keys`, { bearer: jwt })).body.data;
    expect(listed.map((k: { name: string; is_default: boolean }) => [k.name, k.is_default])).to.deep.equal([
      ['Main', true],
      ['Second program', false],
    ]);
    expect(listed[0]).to.deep.include({
      redacted_value: `sk-svc-…${r.body.api_key.slice(-4)}`,
      models: ['gpt-4.1-mini'],
      limits: { requests_per_minute: 7, monthly_spend_limit_usd: null },
    });
    const live = (await keysOf(account.id)).filter((k) => k.revoked_at === null);
    expect(live).to.have.length(2);
  });

  it('tells subscription info when the next regeneration is allowed: null until one is made, then two hours after it', async () => {
    const { account, jwt } = await createTestAccount(web.app);
    expect((await subscriptionInfo(web.app, account.id)).api_key).to.deep.equal({ next_regeneration_at: null });
    const madeAt = clock.now().getTime();
    expect((await regenerate(jwt)).status).to.equal(200);
    clock.advance(30 * 60_000);
    expect((await subscriptionInfo(web.app, account.id)).api_key).to.deep.equal({
      next_regeneration_at: new Date(madeAt + TWO_HOURS).toISOString(),
    });
    clock.advance(90 * 60_000);
    expect((await subscriptionInfo(web.app, account.id)).api_key).to.deep.equal({ next_regeneration_at: null });
  });

  it('keeps exactly one default key per account, and records when the old one was revoked', async () => {
    const { account, jwt } = await createTestAccount(web.app);
    await regenerate(jwt);
    const keys = await keysOf(account.id);
    expect(keys).to.have.length(2);
    expect(keys.filter((k) => k.revoked_at === null)).to.have.length(1);
    expect(keys.find((k) => k.revoked_at !== null)!.revoked_at).to.deep.equal(clock.now());
  });

  it('refuses a second regeneration within 2 hours with 429, x-should-retry: false, the reset time and the OpenAI envelope, and keeps the current key', async () => {
    const { account, jwt } = await createTestAccount(web.app);
    const first = await regenerate(jwt);
    clock.advance(30 * 60_000);
    const second = await regenerate(jwt);
    expect(second.status).to.equal(429);
    // 90 minutes is too long for Retry-After (SDKs would sleep through it): the reset is in the headers and the message.
    expect(second.headers.get('retry-after')).to.equal(null);
    expect(second.headers.get('x-should-retry')).to.equal('false');
    expect(second.headers.get('x-ratelimit-reset')).to.equal(String(90 * 60));
    const resetAt = new Date(Math.ceil((clock.now().getTime() + 90 * 60_000) / 1000) * 1000);
    expect(second.body.error.message).to.include(`at ${resetAt.toISOString().replace('.000Z', 'Z')} (in 1 h 30 min)`);
    expect(second.headers.get('x-ratelimit-limit')).to.equal('1');
    expect(second.headers.get('x-ratelimit-remaining')).to.equal('0');
    expect(second.body).to.deep.equal({
      error: {
        message: second.body.error.message,
        type: 'rate_limit_exceeded',
        code: 'rate_limit_exceeded',
        param: null,
      },
    });
    expect(second.body.error.message).to.match(/2 hours/);
    expect((await probe(first.body.api_key)).status).to.equal(200);
    expect(await keysOf(account.id)).to.have.length(2);
  });

  it('allows the next regeneration once 2 hours have passed', async () => {
    const { account, jwt } = await createTestAccount(web.app);
    expect((await regenerate(jwt)).status).to.equal(200);
    clock.advance(TWO_HOURS - 1000);
    // The first token has expired by now (1 hour): the frontend would hand out a fresh one.
    const fresh = () => mintJwt(web.app.config, clock, { sub: account.id, email: account.email });
    expect((await regenerate(await fresh())).status).to.equal(429);
    clock.advance(1000);
    expect((await regenerate(await fresh())).status).to.equal(200);
  });

  it('lets only one of two concurrent regenerations through', async () => {
    const { account, jwt } = await createTestAccount(web.app);
    const results = await Promise.all([regenerate(jwt), regenerate(jwt)]);
    expect(results.map((r) => r.status).sort()).to.deep.equal([200, 429]);
    expect((await keysOf(account.id)).filter((k) => k.revoked_at === null)).to.have.length(1);
  });

  it('leaves tier, subscription and billing state, and the rate-limit counters, with the account', async () => {
    const { account, jwt } = await createTestAccount(web.app, { tier: 'paid', stripeCustomerId: `cus_${randomId()}` });
    await web.app.db
      .updateTable('accounts')
      .set({ stripe_subscription_id: 'sub_123', subscription_status: 'active', payment_method_last4: '4242' })
      .where('id', '=', account.id)
      .execute();
    const before = await web.app.db
      .selectFrom('accounts')
      .selectAll()
      .where('id', '=', account.id)
      .executeTakeFirstOrThrow();
    const admitOne = async (n: number) =>
      (
        await web.app.limiter.admit({
          accountId: account.id,
          tier: 'paid',
          requestId: `regen-test-${account.id}-${n}`,
          reserveTokens: 10,
        })
      ).headers['x-ratelimit-remaining-requests'];
    const remainingBefore = Number(await admitOne(1));
    expect((await regenerate(jwt)).status).to.equal(200);
    const after = await web.app.db
      .selectFrom('accounts')
      .selectAll()
      .where('id', '=', account.id)
      .executeTakeFirstOrThrow();
    expect(after).to.deep.equal(before);
    expect(Number(await admitOne(2))).to.equal(remainingBefore - 1);
  });

  it('takes only a JWT: an API key gets 401', async () => {
    const { apiKey } = await createTestAccount(web.app);
    const r = await regenerate(apiKey);
    expect(r.status).to.equal(401);
    expect(r.body.error.type).to.equal('authentication_error');
  });

  it('answers 403 to an account that has not verified its email', async () => {
    const { jwt } = await createTestAccount(web.app, { verified: false });
    const r = await regenerate(jwt);
    expect(r.status).to.equal(403);
    expect(r.body.error.code).to.equal('email_not_verified');
  });
});

describe('POST /v1/auth/regenerate-api-key when Redis refuses the key-version bump', () => {
  let redis: PrivateRedis;
  let admin: Redis;
  let web: TestWeb;
  let holder: pg.Client;
  const regenerate = (jwt: string) => post(`${web.url}/v1/auth/regenerate-api-key`, undefined, { bearer: jwt });
  const probe = (key: string) => get(`${web.url}/probe/api_key`, { bearer: key });

  before(async () => {
    redis = await new PrivateRedis().start();
    admin = new Redis(redis.url);
    web = await startTestWeb({
      routes: [...accountsRoutes(), ...keysRoutes(), ...credentialProbeRoutes()],
      env: { REDIS_URL: redis.url },
    });
    holder = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await holder.connect();
  });
  after(async () => {
    await holder?.end();
    await web?.close();
    admin?.disconnect();
    await redis?.stop();
  });

  it('fails with 503, commits nothing, and the current key stays the only key', async () => {
    const { account, apiKey, jwt } = await createTestAccount(web.app);
    // Used twice, so this process caches it (the first use only ties the key to its account).
    for (let i = 0; i < 2; i++) expect((await probe(apiKey)).status).to.equal(200);

    // The regeneration passes its rate limit in Redis, then waits here on the account's row lock
    // while Redis starts refusing writes (out of memory, noeviction), as a failing Redis does.
    await holder.query('begin');
    await holder.query('select id from accounts where id = $1 for update', [account.id]);
    const answer = regenerate(jwt);
    await eventually(async () => {
      const r = await holder.query(
        "select 1 from pg_stat_activity where wait_event_type = 'Lock' and datname = current_database() and pid <> pg_backend_pid()",
      );
      return r.rowCount! > 0 ? true : undefined;
    }, 'the regeneration waiting on the account row');
    await admin.config('SET', 'maxmemory-policy', 'noeviction');
    await admin.config('SET', 'maxmemory', '1');
    await holder.query('commit');
    const r = await answer;
    await admin.config('SET', 'maxmemory', '0');

    expect(r.status).to.equal(503);
    expect(r.body.error.code).to.equal('service_unavailable');
    expect(r.body.error.message).to.match(/not regenerated.*current key still works/);
    expect(r.body).not.to.have.nested.property('api_key');
    const keys = await web.app.db.selectFrom('api_keys').selectAll().where('account_id', '=', account.id).execute();
    expect(keys.map((k) => k.revoked_at)).to.deep.equal([null]);
    expect((await probe(apiKey)).body.account_id).to.equal(account.id);
  });
});
