import { expect } from 'chai';
import { authenticateApiKey } from '../../src/accounts/auth.service.js';
import { accountVersionKey, bumpAccountVersion } from '../../src/accounts/api-key-cache.js';
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
  /** Changed behind the service's back (no version bump): only a cache would still give the old tier. */
  const quietlyUpgrade = (accountId: string) =>
    a.db.updateTable('accounts').set({ tier: 'paid' }).where('id', '=', accountId).execute();

  before(async () => {
    const config = testConfig({ REDIS_PREFIX: isolatedPrefix() });
    a = createContext(config, { role: 'test' });
    b = createContext(config, { role: 'test' });
    await Promise.all([a.warmUp([a.redis]), b.warmUp([b.redis])]);
  });
  after(async () => {
    await Promise.all([a.close(), b.close()]);
  });

  it('caches nothing on a key’s first use: no version could be read before that Postgres read', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    expect(await tierIn(a, apiKey)).to.equal('free');
    await quietlyUpgrade(account.id);
    expect(await tierIn(a, apiKey)).to.equal('paid');
  });

  it('serves a key from the process cache from its second use while the account’s version is unchanged', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    await tierIn(a, apiKey);
    expect(await tierIn(a, apiKey)).to.equal('free');
    await quietlyUpgrade(account.id);
    expect(await tierIn(a, apiKey)).to.equal('free');
    expect(await tierIn(b, apiKey)).to.equal('paid');
  });

  it('re-reads a key on every process once its account’s version is bumped', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    await tierIn(a, apiKey);
    await tierIn(a, apiKey);
    await quietlyUpgrade(account.id);
    await bumpAccountVersion(a, account.id);
    expect(await tierIn(a, apiKey)).to.equal('paid');
  });

  it('never takes a version that expired and was set again for the one an entry was read under', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    await bumpAccountVersion(a, account.id);
    await tierIn(a, apiKey);
    await tierIn(a, apiKey);
    await a.redis.del(accountVersionKey(a.config, account.id));
    await quietlyUpgrade(account.id);
    await bumpAccountVersion(a, account.id);
    expect(await tierIn(a, apiKey)).to.equal('paid');
  });

  it('applies a tier change to the next request on a process that had the key cached', async () => {
    const { account, apiKey } = await createTestAccount(a, { tier: 'free' });
    await tierIn(b, apiKey);
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
      for (let i = 0; i < 2; i++) expect(await tierIn(offline, apiKey)).to.equal('free');
      await quietlyUpgrade(account.id);
      expect(await tierIn(offline, apiKey)).to.equal('paid');
    } finally {
      await offline.close();
    }
  });
});
