import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { sql } from 'kysely';
import { ManualClock } from '../../src/clock.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { NO_CACHE, recordUsage, type UsageSpec } from '../support/billing.js';
import { get, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Usage read per API key: by_key in GET /v1/billing/usage and GET /v1/billing/usage/daily,
// group_by=key, and the key of each request in GET /v1/billing/requests, through real HTTP over
// real Postgres, with the web tier's clock set by hand to May 2021 (2021 belongs to this file: the invoicing tests bill every account that owes
// for 2014 and 2015, so no test may leave paid usage before 2016).

describe('usage per API key (by_key, group_by=key, and the key of each request)', () => {
  let web: TestWeb;
  const clock = new ManualClock('2021-05-20T12:00:00Z');
  let who: TestAccount;

  before(async () => {
    web = await startTestWeb({ clock });
  });
  after(async () => web.close());
  beforeEach(async () => {
    clock.set('2021-05-20T12:00:00Z');
    who = await createTestAccount(web.app, { tier: 'paid' });
  });

  type Key = { id: string; name: string; redacted_value: string; is_default: boolean };
  const createKey = async (name: string): Promise<Key> => {
    const r = await request('POST', `${web.url}/v1/keys`, { bearer: who.jwt, json: { name } });
    expect(r.status, r.text).to.equal(201);
    return r.body as Key;
  };
  const defaultKey = async (): Promise<Key> => {
    const r = await get(`${web.url}/v1/keys`, { bearer: who.jwt });
    return (r.body.data as Key[]).find((k) => k.is_default)!;
  };
  const label = (k: Key, revoked = false) => ({
    key_id: k.id,
    name: k.name,
    redacted_value: k.redacted_value,
    is_default: k.is_default,
    revoked,
  });
  const NO_KEY = { key_id: null, name: null, redacted_value: null, is_default: false, revoked: false };
  /** gpt-4.1 at 2.00 in / 8.00 out per 1M tokens; gemini-2.5-flash on the free tier costs nothing. */
  const use = (keyId: string | undefined, prompt: number, at: string, over: Partial<UsageSpec> = {}): UsageSpec => ({
    accountId: who.account.id,
    model: 'gpt-4.1',
    tier: 'paid',
    prompt,
    completion: 1_000,
    at,
    ...(keyId ? { keyId } : {}),
    ...over,
  });
  /** The ledger summed per key for the account over [from, to), independently of the service's totals. */
  const ledgerByKey = async (from: string, to: string) =>
    (
      await sql<{ key_id: string | null; requests: string; prompt: string; cost: string }>`
        select key_id, count(*)::text as requests, sum(prompt_tokens)::text as prompt,
               trim_scale(coalesce(sum(cost_usd) filter (where tier = 'paid'), 0))::text as cost
          from usage_events
         where account_id = ${who.account.id} and created_at >= ${from} and created_at < ${to}
         group by key_id`.execute(web.app.db)
    ).rows;

  describe('GET /v1/billing/usage', () => {
    it("breaks the month down by key, the costliest first, then the busiest, each named as GET /v1/keys shows it, and equal to the ledger's sums", async () => {
      const [def, batch, site] = [await defaultKey(), await createKey('Batch job'), await createKey('Website')];
      await recordUsage(web.app, [
        // Batch job: 2 paid requests, 0.028 + 0.048 = 0.076 USD.
        use(batch.id, 10_000, '2021-05-02T08:00:00Z'),
        use(batch.id, 20_000, '2021-05-19T08:00:00Z'),
        // Default: 1 paid request, 0.028 USD.
        use(def.id, 10_000, '2021-05-03T08:00:00Z'),
        // Website: 2 free-tier requests (before an upgrade): no cost, more requests than the next.
        use(site.id, 500, '2021-05-01T01:00:00Z', { tier: 'free', model: 'gemini-2.5-flash' }),
        use(site.id, 500, '2021-05-01T02:00:00Z', { tier: 'free', model: 'gemini-2.5-flash' }),
        // Recorded without a key (as before keys were): 1 free request, no cost.
        use(undefined, 100, '2021-05-04T00:00:00Z', { tier: 'free', model: 'gemini-2.5-flash' }),
        // Last month's usage is not this month's.
        use(site.id, 999_999, '2021-04-30T23:59:59Z'),
      ]);
      const r = await get(`${web.url}/v1/billing/usage`, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      const figures = (requests: number, billable: number, prompt: number, cost: string, cents: number) => ({
        requests,
        billable_requests: billable,
        prompt_tokens: prompt,
        completion_tokens: 1_000 * requests,
        total_tokens: prompt + 1_000 * requests,
        ...NO_CACHE,
        cost_usd: cost,
        cost_cents: cents,
        cost: `0.${String(cents).padStart(2, '0')}`,
      });
      expect(r.body.by_key).to.deep.equal([
        { ...label(batch), ...figures(2, 2, 30_000, '0.076', 8) },
        { ...label(def), ...figures(1, 1, 10_000, '0.028', 3) },
        { ...label(site), ...figures(2, 0, 1_000, '0', 0) },
        { ...NO_KEY, ...figures(1, 0, 100, '0', 0) },
      ]);
      expect(def.is_default).to.equal(true);
      const truth = await ledgerByKey('2021-05-01T00:00:00Z', '2021-05-20T12:00:00Z');
      expect(
        r.body.by_key.map(
          (k: { key_id: string | null; requests: number; prompt_tokens: number; cost_usd: string }) => ({
            key_id: k.key_id,
            requests: String(k.requests),
            prompt: String(k.prompt_tokens),
            cost: k.cost_usd,
          }),
        ),
      ).to.have.deep.members(truth);
    });

    it('shows a revoked key with its name, and a key no longer on record as revoked with no name', async () => {
      const site = await createKey('Website');
      const gone = randomUUID();
      await recordUsage(web.app, [
        use(site.id, 10_000, '2021-05-02T08:00:00Z'),
        use(gone, 1_000, '2021-05-03T08:00:00Z'),
      ]);
      const revoke = await request('DELETE', `${web.url}/v1/keys/${site.id}`, { bearer: who.jwt });
      expect(revoke.status, revoke.text).to.equal(200);
      const r = await get(`${web.url}/v1/billing/usage`, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      expect(
        r.body.by_key.map(({ key_id, name, redacted_value, is_default, revoked }: Record<string, unknown>) => ({
          key_id,
          name,
          redacted_value,
          is_default,
          revoked,
        })),
      ).to.deep.equal([
        label(site, true),
        { key_id: gone, name: null, redacted_value: null, is_default: false, revoked: true },
      ]);
    });

    it('answers an empty by_key for a month without usage', async () => {
      const r = await get(`${web.url}/v1/billing/usage`, { bearer: who.apiKey });
      expect(r.status, r.text).to.equal(200);
      expect(r.body.by_key).to.deep.equal([]);
    });
  });

  describe('GET /v1/billing/usage/daily', () => {
    it("gives each key's totals in by_key, adding up to totals, and with group_by=key one entry per day, model and key", async () => {
      const [batch, site] = [await createKey('Batch job'), await createKey('Website')];
      await recordUsage(web.app, [
        use(batch.id, 10_000, '2021-05-02T08:00:00Z'),
        use(site.id, 20_000, '2021-05-02T09:00:00Z'),
        use(site.id, 30_000, '2021-05-02T10:00:00Z', { api: 'responses' }),
        use(undefined, 40_000, '2021-05-02T11:00:00Z'),
        use(batch.id, 50_000, '2021-05-03T00:00:00Z'),
      ]);
      const figures = (requests: number, prompt: number, cost: string) => ({
        requests,
        prompt_tokens: prompt,
        completion_tokens: 1_000 * requests,
        total_tokens: prompt + 1_000 * requests,
        ...NO_CACHE,
        cost_usd: cost,
      });
      const together = await get(`${web.url}/v1/billing/usage/daily`, { bearer: who.apiKey });
      expect(together.status, together.text).to.equal(200);
      expect(together.body.data).to.deep.equal([
        { date: '2021-05-02', model: 'gpt-4.1', ...figures(4, 100_000, '0.232') },
        { date: '2021-05-03', model: 'gpt-4.1', ...figures(1, 50_000, '0.108') },
      ]);
      expect(together.body.totals).to.deep.equal(figures(5, 150_000, '0.34'));
      expect(together.body.by_key).to.deep.equal([
        { ...label(batch), ...figures(2, 60_000, '0.136') },
        { ...label(site), ...figures(2, 50_000, '0.116') },
        { ...NO_KEY, ...figures(1, 40_000, '0.088') },
      ]);

      const apart = await get(`${web.url}/v1/billing/usage/daily?group_by=key`, { bearer: who.apiKey });
      expect(apart.status, apart.text).to.equal(200);
      // By day, model, then key id; the usage of no recorded key last.
      const [first, second] = [batch.id, site.id].sort();
      const byId: Record<string, ReturnType<typeof figures>> = {
        [batch.id]: figures(1, 10_000, '0.028'),
        [site.id]: figures(2, 50_000, '0.116'),
      };
      expect(apart.body.data).to.deep.equal([
        { date: '2021-05-02', model: 'gpt-4.1', key_id: first, ...byId[first!] },
        { date: '2021-05-02', model: 'gpt-4.1', key_id: second, ...byId[second!] },
        { date: '2021-05-02', model: 'gpt-4.1', key_id: null, ...figures(1, 40_000, '0.088') },
        { date: '2021-05-03', model: 'gpt-4.1', key_id: batch.id, ...figures(1, 50_000, '0.108') },
      ]);
      expect({ totals: apart.body.totals, by_api: apart.body.by_api, by_key: apart.body.by_key }).to.deep.equal({
        totals: together.body.totals,
        by_api: together.body.by_api,
        by_key: together.body.by_key,
      });

      // group_by=api sums every key of a day, model and API into one entry.
      const perApi = await get(`${web.url}/v1/billing/usage/daily?group_by=api`, { bearer: who.apiKey });
      expect(perApi.body.data).to.deep.equal([
        { date: '2021-05-02', model: 'gpt-4.1', api: 'chat.completions', ...figures(3, 70_000, '0.164') },
        { date: '2021-05-02', model: 'gpt-4.1', api: 'responses', ...figures(1, 30_000, '0.068') },
        { date: '2021-05-03', model: 'gpt-4.1', api: 'chat.completions', ...figures(1, 50_000, '0.108') },
      ]);
    });
  });

  describe('GET /v1/billing/requests', () => {
    it('names the key of each request, a revoked one included, and none for a request recorded without one', async () => {
      const site = await createKey('Website');
      const [withKey, without] = [
        await recordUsage(web.app, [use(site.id, 100, '2021-05-10T10:00:00Z')]),
        await recordUsage(web.app, [use(undefined, 100, '2021-05-10T10:00:01Z')]),
      ];
      await request('DELETE', `${web.url}/v1/keys/${site.id}`, { bearer: who.jwt });
      const r = await get(`${web.url}/v1/billing/requests`, { bearer: who.jwt });
      expect(r.status, r.text).to.equal(200);
      expect(r.body.data.map((d: Record<string, unknown>) => [d.id, d.key_id, d.key_name])).to.deep.equal([
        [without[0], null, null],
        [withKey[0], site.id, 'Website'],
      ]);
    });
  });
});
