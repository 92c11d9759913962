import { expect } from 'chai';
import { authenticateApiKey } from '../../src/accounts/auth.service.js';
import { hashApiKey } from '../../src/accounts/api-keys.js';
import { apiKeyVersionKey } from '../../src/accounts/api-key-cache.js';
import { createContext, type AppContext } from '../../src/context.js';
import { transaction } from '../../src/infra/db.js';
import { changeTier } from '../../src/subscriptions/tier.service.js';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';

/** Two contexts stand for two web processes: each has its own cache, both share Postgres and Redis. */
describe('API key cache: one Redis GET per request instead of a Postgres lookup, never a stale answer', () => {
  let a: AppContext;
  let b: AppContext;
  const tierIn = async (app: AppContext, key: string) => (await authenticateApiKey(app, key)).tier;

  before(async () => {
    const config = testConfig({ REDIS_PREFIX: isolatedPrefix() });
    a = createContext(config, { role: 'test' });
    b = createContext(config, { role: 'test' });
    await Promise.all([a.warmUp([a.redis]), b.warmUp([b.redis])]);
  });
  after(async () => {
    await Promise.all([a.close(), b.close()]);
  });

  it('serves a key it has seen from the process cache while the key’s version is unchanged', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    expect(await tierIn(a, apiKey)).to.equal('free');
    // Changed behind the service's back (no version bump): only a cache would still say free.
    await a.db.updateTable('accounts').set({ tier: 'paid' }).where('id', '=', account.id).execute();
    expect(await tierIn(a, apiKey)).to.equal('free');
    expect(await tierIn(b, apiKey)).to.equal('paid');
  });

  it('re-reads a key on every process once its version is bumped', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    await tierIn(a, apiKey);
    await a.db.updateTable('accounts').set({ tier: 'paid' }).where('id', '=', account.id).execute();
    await a.redis.incr(apiKeyVersionKey(a, hashApiKey(apiKey)));
    expect(await tierIn(a, apiKey)).to.equal('paid');
  });

  it('applies a tier change to the next request on a process that had the key cached', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    expect(await tierIn(b, apiKey)).to.equal('free');
    await transaction(a.db, (trx) => changeTier(a, trx, account.id, 'paid', 'test', a.clock.now()));
    expect(await tierIn(b, apiKey)).to.equal('paid');
  });

  it('refuses to register after-commit work on a transaction that would not run it', async () => {
    const { account } = await createTestAccount(a, { tier: 'free' });
    let thrown: unknown;
    await a.db
      .transaction()
      .execute((trx) => changeTier(a, trx, account.id, 'paid', 'test', a.clock.now()))
      .catch((err: unknown) => (thrown = err));
    expect(String(thrown)).to.match(/onCommit needs a transaction started with transaction\(\)/);
    const row = await a.db.selectFrom('accounts').select('tier').where('id', '=', account.id).executeTakeFirstOrThrow();
    expect(row.tier).to.equal('free');
  });

  it('asks Postgres, and caches nothing, while Redis is unreachable', async () => {
    const config = testConfig({ REDIS_PREFIX: isolatedPrefix(), REDIS_URL: 'redis://127.0.0.1:1' });
    const offline = createContext(config, { role: 'test' });
    try {
      const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
      expect(await tierIn(offline, apiKey)).to.equal('free');
      await a.db.updateTable('accounts').set({ tier: 'paid' }).where('id', '=', account.id).execute();
      expect(await tierIn(offline, apiKey)).to.equal('paid');
    } finally {
      await offline.close();
    }
  });
});
