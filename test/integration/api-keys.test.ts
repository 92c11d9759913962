import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { MAX_KEYS_PER_ACCOUNT } from '../../src/accounts/keys.schema.js';
import { hashApiKey } from '../../src/accounts/api-keys.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { request, type HttpResult } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

/** Keys as a resource (GET/POST/PATCH/DELETE /v1/keys), on two web processes sharing Postgres and Redis. */
describe('API keys: many named keys per account, managed with the frontend JWT', function () {
  this.timeout(30_000);
  const clock = new ManualClock(Date.now());
  let web: TestWeb;
  let other: TestWeb;
  let owner: TestAccount;

  before(async () => {
    const env = { REDIS_PREFIX: isolatedPrefix() };
    web = await startTestWeb({ env, clock });
    other = await startTestWeb({ env, clock });
  });
  after(async () => {
    await Promise.all([web.close(), other.close()]);
  });
  beforeEach(async () => {
    owner = await createTestAccount(web.app, { tier: 'free' });
  });

  const keys = (method: string, path = '', json?: unknown, bearer = owner.jwt, on = web) =>
    request(method, `${on.url}/v1/keys${path}`, { bearer, ...(json !== undefined ? { json } : {}) });
  const create = async (json: unknown = { name: 'Report job' }) => {
    const r = await keys('POST', '', json);
    expect(r.status, r.text).to.equal(201);
    return r.body as { id: string; api_key: string } & Record<string, unknown>;
  };
  /** A call an API key authenticates (the models list). */
  const useKey = (key: string, on = web) => request('GET', `${on.url}/v1/models`, { bearer: key });
  const row = (id: string) =>
    web.app.db.selectFrom('api_keys').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const expectInvalidKey = (r: HttpResult) => {
    expect(r.status, r.text).to.equal(401);
    expect(r.body.error).to.include({ type: 'authentication_error', code: 'invalid_api_key' });
  };

  it('creates a key with its settings and returns its secret once, with no-store', async () => {
    const expiresAt = new Date(clock.now().getTime() + 86_400_000).toISOString();
    const r = await keys('POST', '', {
      name: 'Report job',
      models: ['gpt-4.1-mini'],
      limits: { requests_per_minute: 5, monthly_spend_limit_usd: '7.5' },
      expires_at: expiresAt,
    });
    expect(r.status, r.text).to.equal(201);
    expect(r.headers.get('cache-control')).to.equal('no-store');
    const key = r.body;
    expect(key.api_key).to.match(/^sk-svc-/);
    expect(key).to.deep.include({
      name: 'Report job',
      redacted_value: `sk-svc-…${key.api_key.slice(-4)}`,
      is_default: false,
      last_used_at: null,
      expires_at: expiresAt,
      models: ['gpt-4.1-mini'],
      limits: { requests_per_minute: 5, monthly_spend_limit_usd: '7.50' },
      disabled: false,
    });
    const stored = await row(key.id);
    expect(stored.key_hash).to.equal(hashApiKey(key.api_key));
    expect(stored.account_id).to.equal(owner.account.id);
    expect((await useKey(key.api_key)).status).to.equal(200);
  });

  it('lists the live keys, the default key first, with no secret anywhere in the answer', async () => {
    const created = await create();
    const r = await keys('GET');
    expect(r.status).to.equal(200);
    expect(r.body.object).to.equal('list');
    expect(r.body.data.map((k: { name: string; is_default: boolean }) => [k.name, k.is_default])).to.deep.equal([
      ['Default', true],
      ['Report job', false],
    ]);
    expect(r.text).not.to.include(created.api_key);
    expect(r.text).not.to.include(owner.apiKey);
    expect(r.text).not.to.include('api_key"');
    expect(r.text).not.to.include((await row(created.id)).key_hash);
  });

  it('does not let an API key manage keys (401, as the other JWT-only routes)', async () => {
    for (const [method, path] of [
      ['GET', ''],
      ['POST', ''],
      ['DELETE', '/00000000-0000-0000-0000-000000000000'],
    ] as const) {
      const r = await keys(method, path, method === 'POST' ? { name: 'x' } : undefined, owner.apiKey);
      expect(r.status, `${method} ${path}`).to.equal(401);
      expect(r.body.error.code).to.equal('invalid_token');
    }
  });

  it('changes only what a PATCH gives, and the change holds on the next request on every process', async () => {
    const key = await create({ name: 'Report job', models: ['gpt-4.1-mini'] });
    // Both processes have the key cached (its second use on each).
    for (const on of [web, other, web, other]) expect((await useKey(key.api_key, on)).status).to.equal(200);
    const r = await keys('PATCH', `/${key.id}`, { name: 'Nightly', disabled: true });
    expect(r.status, r.text).to.equal(200);
    expect(r.body).to.deep.include({ name: 'Nightly', disabled: true, models: ['gpt-4.1-mini'] });
    expect(await row(key.id)).to.deep.include({ name: 'Nightly', disabled: true, models: ['gpt-4.1-mini'] });
    expectInvalidKey(await useKey(key.api_key, other));
    expectInvalidKey(await useKey(key.api_key, web));
    await keys('PATCH', `/${key.id}`, { disabled: false, models: null });
    expect((await useKey(key.api_key, other)).status).to.equal(200);
  });

  it('revokes a key at once on a second web process that had it cached', async () => {
    const key = await create();
    for (const on of [other, other]) expect((await useKey(key.api_key, on)).status).to.equal(200);
    const r = await keys('DELETE', `/${key.id}`);
    expect(r.status, r.text).to.equal(200);
    expect(r.body).to.deep.equal({ id: key.id, object: 'api_key.deleted', deleted: true });
    expectInvalidKey(await useKey(key.api_key, other));
    expect((await row(key.id)).revoked_at).to.be.an.instanceOf(Date);
    // The account's other keys keep working.
    expect((await useKey(owner.apiKey, other)).status).to.equal(200);
    expect((await keys('GET')).body.data.map((k: { id: string }) => k.id)).not.to.include(key.id);
  });

  it('refuses a key once its expiry has passed (401), on the clock the service runs on', async () => {
    const key = await create({
      name: 'Short-lived',
      expires_at: new Date(clock.now().getTime() + 600_000).toISOString(),
    });
    expect((await useKey(key.api_key)).status).to.equal(200);
    expect((await useKey(key.api_key)).status).to.equal(200);
    clock.advance(600_000);
    const r = await useKey(key.api_key);
    expectInvalidKey(r);
    expect(r.body.error.message).to.match(/expired/);
  });

  it('answers 404 for an unknown key id and for another account’s key', async () => {
    const stranger = await createTestAccount(web.app);
    const theirs = (await keys('POST', '', { name: 'Theirs' }, stranger.jwt)).body;
    for (const id of ['00000000-0000-0000-0000-000000000000', theirs.id]) {
      for (const method of ['PATCH', 'DELETE']) {
        const r = await keys(method, `/${id}`, method === 'PATCH' ? { name: 'Mine now' } : undefined);
        expect(r.status, `${method} ${id}`).to.equal(404);
        expect(r.body.error.code).to.equal('key_not_found');
      }
    }
    expect((await row(theirs.id)).name).to.equal('Theirs');
    expect((await useKey(theirs.api_key)).status).to.equal(200);
  });

  it('does not delete the default key (409 default_key); it stays working', async () => {
    const def = (await keys('GET')).body.data[0];
    const r = await keys('DELETE', `/${def.id}`);
    expect(r.status).to.equal(409);
    expect(r.body.error.code).to.equal('default_key');
    expect((await useKey(owner.apiKey)).status).to.equal(200);
  });

  it(`holds at most ${MAX_KEYS_PER_ACCOUNT} live keys per account (409 key_limit_reached)`, async () => {
    const more = await Promise.all(
      Array.from({ length: MAX_KEYS_PER_ACCOUNT - 1 }, (_, i) => keys('POST', '', { name: `Key ${i}` })),
    );
    expect(more.map((r) => r.status)).to.deep.equal(Array(MAX_KEYS_PER_ACCOUNT - 1).fill(201));
    const r = await keys('POST', '', { name: 'One too many' });
    expect(r.status).to.equal(409);
    expect(r.body.error.code).to.equal('key_limit_reached');
    await keys('DELETE', `/${more[0]!.body.id}`);
    expect((await keys('POST', '', { name: 'Room again' })).status).to.equal(201);
  });

  it('refuses an unknown model, a limit out of range and a past expiry with 422 at each field', async () => {
    const r = await keys('POST', '', {
      name: 'Bad',
      models: ['gpt-4.1-mini', 'no-such-model'],
      limits: { monthly_spend_limit_usd: '0.00' },
      expires_at: new Date(clock.now().getTime() - 1000).toISOString(),
    });
    expect(r.status).to.equal(422);
    expect(r.body.detail.map((d: { loc: unknown[] }) => d.loc)).to.deep.equal([
      ['body', 'models', 1],
      ['body', 'limits', 'monthly_spend_limit_usd'],
      ['body', 'expires_at'],
    ]);
    expect(
      await web.app.db.selectFrom('api_keys').select('id').where('account_id', '=', owner.account.id).execute(),
    ).to.have.length(1);
  });

  it('records when a key was last used, at most once a minute', async () => {
    const key = await create();
    await useKey(key.api_key);
    const first = clock.now().toISOString();
    const seen = async () => (await keys('GET')).body.data.find((k: { id: string }) => k.id === key.id).last_used_at;
    // The write runs beside the request: wait for it by reading, not by sleeping.
    for (let i = 0; i < 100 && (await seen()) === null; i++) await new Promise((r) => setImmediate(r));
    expect(await seen()).to.equal(first);
    clock.advance(30_000);
    await useKey(key.api_key);
    expect(await seen()).to.equal(first);
  });
});
