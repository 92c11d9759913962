import { expect } from 'chai';
import { sql } from 'kysely';
import { ManualClock } from '../../src/clock.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { NO_CACHE, NO_CACHE_TOKENS, recordUsage, type UsageSpec } from '../support/billing.js';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// GET /v1/billing/usage/daily and GET /v1/billing/requests through real HTTP over real Postgres,
// with the web tier's clock set by hand to March 2019 (2019 belongs to this file).

describe('usage per day and the requests list (GET /v1/billing/usage/daily, /v1/billing/requests)', () => {
  let web: TestWeb;
  const clock = new ManualClock('2019-03-20T12:00:00Z');

  before(async () => {
    web = await startTestWeb({ clock });
  });
  after(async () => web.close());
  beforeEach(() => clock.set('2019-03-20T12:00:00Z'));

  const daily = (who: TestAccount, query = '') =>
    get(`${web.url}/v1/billing/usage/daily${query}`, { bearer: who.apiKey });
  const requests = (who: TestAccount, query = '') => get(`${web.url}/v1/billing/requests${query}`, { bearer: who.jwt });

  /** The ledger summed directly per UTC day and model over [from, to], independently of the service's rollup. */
  const ledgerByDay = async (accountId: string, from: string, to: string) =>
    (
      await sql<{ date: string; model: string; requests: string; prompt: string; completion: string; cost: string }>`
        select to_char(created_at at time zone 'UTC', 'YYYY-MM-DD') as date, model, count(*)::text as requests,
               sum(prompt_tokens)::text as prompt, sum(completion_tokens)::text as completion,
               coalesce(sum(cost_usd) filter (where tier = 'paid'), 0)::text as cost
          from usage_events
         where account_id = ${accountId} and (created_at at time zone 'UTC')::date between ${from}::date and ${to}::date
         group by 1, 2 order by 1, 2`.execute(web.app.db)
    ).rows;

  const NO_USAGE = { requests: 0, prompt_tokens: 0, completion_tokens: 0, total_tokens: 0, ...NO_CACHE, cost_usd: '0' };

  describe('GET /v1/billing/usage/daily', () => {
    it('answers this month to date by default: one entry per UTC day and model with usage, and totals equal to the ledger', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      const other = await createTestAccount(web.app, { tier: 'paid' });
      const at = (
        model: string,
        tier: 'free' | 'paid',
        prompt: number,
        completion: number,
        when: string,
      ): UsageSpec => ({
        accountId: who.account.id,
        model,
        tier,
        prompt,
        completion,
        at: when,
      });
      await recordUsage(web.app, [
        // Last month: outside the default period.
        at('gpt-4.1', 'paid', 999_999, 0, '2019-02-28T23:59:59.999Z'),
        // gpt-4.1 at 2.00 in / 8.00 out per 1M tokens: 0.02 + 0.008 = 0.028 USD, twice on the 1st.
        at('gpt-4.1', 'paid', 10_000, 1_000, '2019-03-01T00:00:00Z'),
        at('gpt-4.1', 'paid', 10_000, 1_000, '2019-03-01T23:59:59Z'),
        // Free tier: counted, not charged.
        at('gemini-2.5-flash', 'free', 1_000, 500, '2019-03-01T10:00:00Z'),
        at('gpt-4.1', 'paid', 5_000, 500, '2019-03-20T11:00:00Z'),
      ]);
      await recordUsage(web.app, [
        {
          accountId: other.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 7,
          completion: 7,
          at: '2019-03-02T00:00:00Z',
        },
      ]);
      const r = await daily(who);
      expect(r.status, r.text).to.equal(200);
      expect(r.body).to.deep.equal({
        object: 'list',
        timezone: 'UTC',
        start_date: '2019-03-01',
        end_date: '2019-03-20',
        data: [
          {
            date: '2019-03-01',
            model: 'gemini-2.5-flash',
            requests: 1,
            prompt_tokens: 1000,
            completion_tokens: 500,
            total_tokens: 1500,
            ...NO_CACHE,
            cost_usd: '0',
          },
          {
            date: '2019-03-01',
            model: 'gpt-4.1',
            requests: 2,
            prompt_tokens: 20000,
            completion_tokens: 2000,
            total_tokens: 22000,
            ...NO_CACHE,
            cost_usd: '0.056',
          },
          {
            date: '2019-03-20',
            model: 'gpt-4.1',
            requests: 1,
            prompt_tokens: 5000,
            completion_tokens: 500,
            total_tokens: 5500,
            ...NO_CACHE,
            cost_usd: '0.014',
          },
        ],
        totals: {
          requests: 4,
          prompt_tokens: 26000,
          completion_tokens: 3000,
          total_tokens: 29000,
          ...NO_CACHE,
          cost_usd: '0.07',
        },
        by_api: [
          {
            api: 'chat.completions',
            requests: 4,
            prompt_tokens: 26000,
            completion_tokens: 3000,
            total_tokens: 29000,
            ...NO_CACHE,
            cost_usd: '0.07',
          },
          { api: 'responses', ...NO_USAGE },
        ],
        // Rows recorded without a key (as before keys were) are one entry of their own.
        by_key: [
          {
            key_id: null,
            name: null,
            redacted_value: null,
            is_default: false,
            revoked: false,
            requests: 4,
            prompt_tokens: 26000,
            completion_tokens: 3000,
            total_tokens: 29000,
            ...NO_CACHE,
            cost_usd: '0.07',
          },
        ],
      });
      const truth = await ledgerByDay(who.account.id, '2019-03-01', '2019-03-20');
      expect(
        r.body.data.map((d: { date: string; model: string; requests: number; prompt_tokens: number }) => [
          d.date,
          d.model,
          String(d.requests),
          String(d.prompt_tokens),
        ]),
      ).to.deep.equal(truth.map((t) => [t.date, t.model, t.requests, t.prompt]));
    });

    it('takes start_date and end_date as UTC days, both inclusive, and an end date alone as its month to that day', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 1,
          completion: 1,
          at: '2019-01-31T23:59:59Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 2,
          completion: 2,
          at: '2019-02-01T00:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 3,
          completion: 3,
          at: '2019-02-10T08:00:00Z',
        },
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 4,
          completion: 4,
          at: '2019-02-11T00:00:00Z',
        },
      ]);
      const span = await daily(who, '?start_date=2019-01-31&end_date=2019-02-10');
      expect(span.status, span.text).to.equal(200);
      expect(span.body).to.include({ start_date: '2019-01-31', end_date: '2019-02-10' });
      expect(span.body.data.map((d: { date: string }) => d.date)).to.deep.equal([
        '2019-01-31',
        '2019-02-01',
        '2019-02-10',
      ]);
      expect(span.body.totals).to.include({ requests: 3, prompt_tokens: 6 });

      const endOnly = await daily(who, '?end_date=2019-02-10');
      expect(endOnly.body).to.include({ start_date: '2019-02-01', end_date: '2019-02-10' });
      expect(endOnly.body.totals).to.include({ requests: 2, prompt_tokens: 5 });

      const empty = await daily(who, '?start_date=2019-02-12&end_date=2019-02-12');
      expect(empty.status).to.equal(200);
      expect(empty.body.data).to.deep.equal([]);
      expect(empty.body.totals).to.deep.equal(NO_USAGE);
      expect(empty.body.by_api).to.deep.equal([
        { api: 'chat.completions', ...NO_USAGE },
        { api: 'responses', ...NO_USAGE },
      ]);
      expect(empty.body.by_key).to.deep.equal([]);
    });

    it("gives each API's totals in by_api, and with group_by=api one entry per day, model and API", async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      const use = (api: 'chat.completions' | 'responses', model: string, prompt: number, when: string): UsageSpec => ({
        accountId: who.account.id,
        api,
        model,
        tier: 'paid',
        prompt,
        completion: 1_000,
        at: when,
      });
      await recordUsage(web.app, [
        // gpt-4.1 at 2.00 in / 8.00 out per 1M tokens.
        use('chat.completions', 'gpt-4.1', 10_000, '2019-03-02T08:00:00Z'),
        use('responses', 'gpt-4.1', 20_000, '2019-03-02T09:00:00Z'),
        use('responses', 'gpt-4.1', 30_000, '2019-03-02T23:59:59Z'),
        use('responses', 'gpt-4.1', 40_000, '2019-03-03T00:00:00Z'),
      ]);
      const figures = (requests: number, prompt: number, cost: string) => ({
        requests,
        prompt_tokens: prompt,
        completion_tokens: 1_000 * requests,
        total_tokens: prompt + 1_000 * requests,
        ...NO_CACHE,
        cost_usd: cost,
      });
      const together = await daily(who);
      expect(together.status, together.text).to.equal(200);
      expect(together.body.data).to.deep.equal([
        { date: '2019-03-02', model: 'gpt-4.1', ...figures(3, 60_000, '0.144') },
        { date: '2019-03-03', model: 'gpt-4.1', ...figures(1, 40_000, '0.088') },
      ]);
      expect(together.body.totals).to.deep.equal(figures(4, 100_000, '0.232'));
      expect(together.body.by_api).to.deep.equal([
        { api: 'chat.completions', ...figures(1, 10_000, '0.028') },
        { api: 'responses', ...figures(3, 90_000, '0.204') },
      ]);

      const apart = await daily(who, '?group_by=api');
      expect(apart.status, apart.text).to.equal(200);
      expect(apart.body.data).to.deep.equal([
        { date: '2019-03-02', model: 'gpt-4.1', api: 'chat.completions', ...figures(1, 10_000, '0.028') },
        { date: '2019-03-02', model: 'gpt-4.1', api: 'responses', ...figures(2, 50_000, '0.116') },
        { date: '2019-03-03', model: 'gpt-4.1', api: 'responses', ...figures(1, 40_000, '0.088') },
      ]);
      expect({ totals: apart.body.totals, by_api: apart.body.by_api }).to.deep.equal({
        totals: together.body.totals,
        by_api: together.body.by_api,
      });
      const kept = await sql<{ day: string; api: string; requests: string }>`
        select to_char(day, 'YYYY-MM-DD') as day, api, requests::text from usage_daily_totals
         where account_id = ${who.account.id} order by day, api`.execute(web.app.db);
      expect(kept.rows).to.deep.equal([
        { day: '2019-03-02', api: 'chat.completions', requests: '1' },
        { day: '2019-03-02', api: 'responses', requests: '2' },
        { day: '2019-03-03', api: 'responses', requests: '1' },
      ]);
    });

    it('reads the trigger-kept daily totals, not the ledger', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 10,
          completion: 10,
          at: '2019-03-05T00:00:00Z',
        },
      ]);
      // Only the rollup changes: the endpoint shows it, so it never summed the ledger's rows.
      await sql`update usage_daily_totals set requests = 42 where account_id = ${who.account.id}`.execute(web.app.db);
      const r = await daily(who);
      expect(r.body.data[0]).to.include({ date: '2019-03-05', requests: 42 });
    });

    it('answers 422 for a malformed date, an end before the start, a period over 366 days and a group_by other than api or key', async () => {
      const who = await createTestAccount(web.app);
      const malformed = await daily(who, '?start_date=2019-02-30');
      expect(malformed.status).to.equal(422);
      expect(malformed.body.detail[0]).to.deep.include({ loc: ['query', 'start_date'], type: 'date_parsing' });

      const backwards = await daily(who, '?start_date=2019-03-02&end_date=2019-03-01');
      expect(backwards.status).to.equal(422);
      expect(backwards.body.detail[0]).to.deep.include({ loc: ['query', 'end_date'], type: 'value_error' });

      // 2020 is a leap year: 2019-03-01 to 2020-02-29 inclusive is 366 days, one more is 367.
      const longest = await daily(who, '?start_date=2019-03-01&end_date=2020-02-29');
      expect(longest.status, longest.text).to.equal(200);
      const tooLong = await daily(who, '?start_date=2019-03-01&end_date=2020-03-01');
      expect(tooLong.status).to.equal(422);
      expect(tooLong.body.detail[0]).to.deep.include({ loc: ['query', 'start_date'], type: 'value_error' });
      expect(tooLong.body.detail[0].msg).to.match(/at most 366 days/);

      const byModel = await daily(who, '?group_by=model');
      expect(byModel.status).to.equal(422);
      expect(byModel.body.detail[0].loc).to.deep.equal(['query', 'group_by']);
    });

    it('takes an API key or a JWT, and nothing else', async () => {
      const who = await createTestAccount(web.app);
      expect((await get(`${web.url}/v1/billing/usage/daily`, { bearer: who.jwt })).status).to.equal(200);
      expect((await get(`${web.url}/v1/billing/usage/daily`, { bearer: who.apiKey })).status).to.equal(200);
      expect((await get(`${web.url}/v1/billing/usage/daily`)).status).to.equal(401);
    });
  });

  describe('GET /v1/billing/requests', () => {
    it("lists the account's requests newest first: completion id, time, model, stream flag, outcome, tokens and cost", async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      const other = await createTestAccount(web.app, { tier: 'paid' });
      const [plain, streamed, cancelled, free] = await Promise.all([
        recordUsage(web.app, [
          {
            accountId: who.account.id,
            model: 'gpt-4.1',
            tier: 'paid',
            prompt: 10_000,
            completion: 1_000,
            at: '2019-03-10T10:00:00Z',
          },
        ]),
        recordUsage(web.app, [
          {
            accountId: who.account.id,
            model: 'gpt-4.1',
            tier: 'paid',
            prompt: 100,
            completion: 50,
            at: '2019-03-10T10:00:01Z',
            stream: true,
          },
        ]),
        recordUsage(web.app, [
          {
            accountId: who.account.id,
            model: 'claude-haiku-4-5',
            tier: 'paid',
            prompt: 100,
            completion: 3,
            at: '2019-03-10T10:00:02Z',
            stream: true,
            status: 'cancelled',
          },
        ]),
        recordUsage(web.app, [
          {
            accountId: who.account.id,
            model: 'gemini-2.5-flash',
            tier: 'free',
            prompt: 100,
            completion: 0,
            at: '2019-03-10T10:00:03Z',
            status: 'failed',
          },
        ]),
        recordUsage(web.app, [
          {
            accountId: other.account.id,
            model: 'gpt-4.1',
            tier: 'paid',
            prompt: 1,
            completion: 1,
            at: '2019-03-10T10:00:04Z',
          },
        ]),
      ]);
      const r = await requests(who);
      expect(r.status, r.text).to.equal(200);
      const unix = (iso: string) => Date.parse(iso) / 1000;
      expect(r.body).to.deep.equal({
        object: 'list',
        data: [
          {
            id: free[0],
            created: unix('2019-03-10T10:00:03Z'),
            model: 'gemini-2.5-flash',
            api: 'chat.completions',
            stream: false,
            status: 'failed',
            prompt_tokens: 100,
            completion_tokens: 0,
            total_tokens: 100,
            ...NO_CACHE_TOKENS,
            cost_usd: '0',
            key_id: null,
            key_name: null,
          },
          {
            id: cancelled[0],
            created: unix('2019-03-10T10:00:02Z'),
            model: 'claude-haiku-4-5',
            api: 'chat.completions',
            stream: true,
            status: 'cancelled',
            prompt_tokens: 100,
            completion_tokens: 3,
            total_tokens: 103,
            ...NO_CACHE_TOKENS,
            // 1.00 in / 5.00 out per 1M tokens.
            cost_usd: '0.000115',
            key_id: null,
            key_name: null,
          },
          {
            id: streamed[0],
            created: unix('2019-03-10T10:00:01Z'),
            model: 'gpt-4.1',
            api: 'chat.completions',
            stream: true,
            status: 'completed',
            prompt_tokens: 100,
            completion_tokens: 50,
            total_tokens: 150,
            ...NO_CACHE_TOKENS,
            cost_usd: '0.0006',
            key_id: null,
            key_name: null,
          },
          {
            id: plain[0],
            created: unix('2019-03-10T10:00:00Z'),
            model: 'gpt-4.1',
            api: 'chat.completions',
            stream: false,
            status: 'completed',
            prompt_tokens: 10000,
            completion_tokens: 1000,
            total_tokens: 11000,
            ...NO_CACHE_TOKENS,
            cost_usd: '0.028',
            key_id: null,
            key_name: null,
          },
        ],
        has_more: false,
      });
    });

    it('names the API each request came through, and the ledger row records it', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      const spec = (api: 'chat.completions' | 'responses', at: string): UsageSpec => ({
        accountId: who.account.id,
        api,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 10,
        completion: 10,
        at,
      });
      const [chat] = await recordUsage(web.app, [spec('chat.completions', '2019-03-14T00:00:00Z')]);
      const [response] = await recordUsage(web.app, [spec('responses', '2019-03-14T00:00:01Z')]);
      const r = await requests(who);
      expect(r.status, r.text).to.equal(200);
      expect(r.body.data.map((d: { id: string; api: string }) => [d.id, d.api])).to.deep.equal([
        [response, 'responses'],
        [chat, 'chat.completions'],
      ]);
      const rows = await web.app.db
        .selectFrom('usage_events')
        .select(['request_id', 'api'])
        .where('account_id', '=', who.account.id)
        .orderBy('created_at')
        .execute();
      expect(rows).to.deep.equal([
        { request_id: chat, api: 'chat.completions' },
        { request_id: response, api: 'responses' },
      ]);
    });

    it('pages by keyset with starting_after, every request exactly once in order, even with equal times and rows arriving meanwhile', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      // 25 requests over 5 seconds: five share each second.
      const specs: UsageSpec[] = Array.from({ length: 25 }, (_, i) => ({
        accountId: who.account.id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: i + 1,
        completion: 0,
        at: new Date(Date.parse('2019-03-11T00:00:00Z') + Math.floor(i / 5) * 1000),
      }));
      await recordUsage(web.app, specs);
      const ordered = (
        await web.app.db
          .selectFrom('usage_events')
          .select('request_id')
          .where('account_id', '=', who.account.id)
          .orderBy('created_at', 'desc')
          .orderBy('id', 'desc')
          .execute()
      ).map((x) => x.request_id);

      const first = await requests(who, '?limit=10');
      expect(first.status, first.text).to.equal(200);
      expect(first.body.has_more).to.equal(true);
      // A newer request recorded between pages goes to the top, and shifts nothing after the cursor.
      await recordUsage(web.app, [
        {
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 99,
          completion: 0,
          at: '2019-03-12T00:00:00Z',
        },
      ]);
      const ids: string[] = first.body.data.map((d: { id: string }) => d.id);
      let page = first;
      while (page.body.has_more) {
        page = await requests(who, `?limit=10&starting_after=${encodeURIComponent(ids.at(-1)!)}`);
        expect(page.status, page.text).to.equal(200);
        ids.push(...page.body.data.map((d: { id: string }) => d.id));
      }
      expect(ids).to.deep.equal(ordered);
      expect(page.body.data).to.have.length(5);
    });

    it('pages 20 requests by default and takes a limit from 1 to 100 only', async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      await recordUsage(
        web.app,
        Array.from({ length: 21 }, (_, i) => ({
          accountId: who.account.id,
          model: 'gpt-4.1',
          tier: 'paid' as const,
          prompt: 1,
          completion: 1,
          at: new Date(Date.parse('2019-03-12T00:00:00Z') + i * 1000),
        })),
      );
      const byDefault = await requests(who);
      expect(byDefault.body.data).to.have.length(20);
      expect(byDefault.body.has_more).to.equal(true);
      expect((await requests(who, '?limit=100')).body).to.include({ has_more: false });
      expect((await requests(who, '?limit=1')).body.data).to.have.length(1);
      for (const bad of ['0', '101', '-1', '1.5', 'ten', '']) {
        const r = await requests(who, `?limit=${bad}`);
        expect(r.status, `limit=${bad}`).to.equal(422);
        expect(r.body.detail[0].loc).to.deep.equal(['query', 'limit']);
      }
    });

    it("answers 404 request_not_found for a starting_after that is not one of the account's requests", async () => {
      const who = await createTestAccount(web.app, { tier: 'paid' });
      const other = await createTestAccount(web.app, { tier: 'paid' });
      const [theirs] = await recordUsage(web.app, [
        {
          accountId: other.account.id,
          model: 'gpt-4.1',
          tier: 'paid',
          prompt: 1,
          completion: 1,
          at: '2019-03-13T00:00:00Z',
        },
      ]);
      for (const cursor of [theirs!, 'chatcmpl-unknown']) {
        const r = await requests(who, `?starting_after=${cursor}`);
        expect(r.status).to.equal(404);
        expect(r.body.error).to.include({ code: 'request_not_found', param: 'starting_after' });
      }
    });

    it('takes an API key or a JWT, and nothing else', async () => {
      const who = await createTestAccount(web.app);
      expect((await get(`${web.url}/v1/billing/requests`, { bearer: who.apiKey })).status).to.equal(200);
      expect((await get(`${web.url}/v1/billing/requests`)).status).to.equal(401);
    });
  });
});
