import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { startFakeAnthropic, type FakeAnthropic } from '../../src/providers/anthropic/anthropic.fake.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';

// Anthropic's prompt cache end to end: a paid account asks claude-haiku-4-5 through web and worker
// processes, the fake Anthropic API counts cache reads, writes at both TTLs and thinking tokens in
// its own fields, and the answer's usage, its usage.cost and the ledger row all say the same.
// claude-haiku-4-5's catalog prices, USD per 1M tokens: input 1.00, cached input 0.10, cache
// writes 1.25 (5 minutes) and 2.00 (1 hour), output 5.00.

/**
 * The counts the fake reports: of 20,000 prompt tokens, 4,000 read from the cache, 2,000 written
 * for 5 minutes and 12,000 for an hour (so 2,000 plain input); 1,000 completion tokens, 700 of
 * them thinking.
 */
const USAGE = {
  prompt: 20_000,
  cached: 4_000,
  cacheWrite5m: 2_000,
  cacheWrite1h: 12_000,
  completion: 300,
  thoughts: 700,
};

/**
 * By hand: 2,000 × 1.00 + 4,000 × 0.10 + 2,000 × 1.25 + 12,000 × 2.00 + 1,000 × 5.00
 * = 2,000 + 400 + 2,500 + 24,000 + 5,000 = 33,900 USD per million tokens, so 0.0339 USD.
 */
const COST = '0.0339';

const EXPECTED_USAGE = {
  prompt_tokens: 20_000,
  completion_tokens: 1_000,
  total_tokens: 21_000,
  prompt_tokens_details: { cached_tokens: 4_000, cache_write_tokens: 14_000 },
  completion_tokens_details: { reasoning_tokens: 700 },
  cost: Number(COST),
};

const ONE_HOUR = { type: 'ephemeral', ttl: '1h' };
const FIVE_MINUTES = { type: 'ephemeral' };

/** A long system prompt cached for an hour, and a document in the user's turn cached for 5 minutes. */
const ask = {
  model: 'claude-haiku-4-5',
  messages: [
    { role: 'system', content: 'You are a careful librarian.', cache_control: ONE_HOUR },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'The catalogue: …', cache_control: FIVE_MINUTES },
        { type: 'text', text: 'Which shelf holds atlases?' },
      ],
    },
  ],
  reasoning_effort: 'low',
};

/** A numeric column as its decimal, without the trailing zeros of its scale. */
const decimal = (numeric: string) => numeric.replace(/(\.\d*?)0+$/, '$1').replace(/\.$/, '');

describe("Anthropic's prompt cache through the service: usage, usage.cost and the ledger at each part's price", function () {
  this.timeout(60_000);
  let anthropic: FakeAnthropic;
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let paid: TestAccount;
  let url: string;

  before(async () => {
    anthropic = await startFakeAnthropic();
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      ANTHROPIC_BASE_URL: anthropic.url,
      ANTHROPIC_API_KEY: anthropic.apiKey,
    };
    app = createContext(testConfig(env), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', env), startRole('worker', env)]);
    paid = await createTestAccount(app, { tier: 'paid' });
    url = `${web.url}/v1/chat/completions`;
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
    await anthropic?.close();
  });
  beforeEach(() =>
    anthropic.reset().script({ thinking: 'Atlases are oversized.', tokens: ['Shelf', ' 9.'], usage: USAGE }),
  );

  const ledgerRow = (requestId: string) =>
    eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', requestId).executeTakeFirst(),
      'the usage row',
    );

  async function expectLedgerRowToMatch(requestId: string) {
    const row = await ledgerRow(requestId);
    expect({
      prompt_tokens: row.prompt_tokens,
      completion_tokens: row.completion_tokens,
      cached_tokens: row.cached_tokens,
      cache_write_tokens: row.cache_write_tokens,
      cache_write_1h_tokens: row.cache_write_1h_tokens,
      reasoning_tokens: row.reasoning_tokens,
      cost_usd: decimal(row.cost_usd),
    }).to.deep.equal({
      prompt_tokens: 20_000,
      completion_tokens: 1_000,
      cached_tokens: 4_000,
      cache_write_tokens: 14_000,
      cache_write_1h_tokens: 12_000,
      reasoning_tokens: 700,
      cost_usd: COST,
    });
  }

  it('passes the marks to Anthropic where the client put them, with their TTLs', async () => {
    const r = await post(url, ask, { bearer: paid.apiKey });
    expect(r.status, r.text).to.equal(200);
    const body = anthropic.lastRequest!.body;
    expect(body.system).to.deep.equal([
      { type: 'text', text: 'You are a careful librarian.', cache_control: ONE_HOUR },
    ]);
    expect(body.messages).to.deep.equal([
      {
        role: 'user',
        content: [
          { type: 'text', text: 'The catalogue: …', cache_control: FIVE_MINUTES },
          { type: 'text', text: 'Which shelf holds atlases?' },
        ],
      },
    ]);
  });

  it('reports cache reads, writes and thinking in a whole answer, priced part by part, as the ledger records them', async () => {
    const r = await post(url, ask, { bearer: paid.apiKey });
    expect(r.status, r.text).to.equal(200);
    expect(r.body.choices[0].message.content).to.equal('Shelf 9.');
    expect(r.body.usage).to.deep.equal(EXPECTED_USAGE);
    await expectLedgerRowToMatch(r.body.id);
  });

  it('reports the same in a stream’s usage chunk (include_usage), as the ledger records them', async () => {
    const s = await postStream(url, { ...ask, stream: true, stream_options: { include_usage: true } }, paid.apiKey);
    expect(s.status).to.equal(200);
    expect(anthropic.lastRequest!.body.stream).to.equal(true);
    expect(s.chunks.at(-1).usage).to.deep.equal(EXPECTED_USAGE);
    await expectLedgerRowToMatch(s.chunks[0].id);
  });

  it('refuses a fifth cache breakpoint with a 422 naming it, and asks Anthropic nothing', async () => {
    const marked = (text: string) => ({ type: 'text', text, cache_control: FIVE_MINUTES });
    const r = await post(
      url,
      {
        model: 'claude-haiku-4-5',
        messages: [{ role: 'user', content: ['a', 'b', 'c', 'd', 'e'].map(marked) }],
      },
      { bearer: paid.apiKey },
    );
    expect(r.status).to.equal(422);
    expect(r.body.detail.map((d: { loc: unknown }) => d.loc)).to.deep.equal([
      ['body', 'messages', 0, 'content', 4, 'cache_control'],
    ]);
    expect(anthropic.requests).to.have.length(0);
  });
});
