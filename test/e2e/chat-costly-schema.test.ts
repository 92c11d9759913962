import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post, type HttpResult } from '../support/http.js';
import { usageRowsOf } from '../support/ledger.repository.js';
import { rolesPerTest } from '../support/processes.js';

// A strict json_schema within every admission limit that still costs the local model seconds of
// CPU: 4,500 string properties with a pattern, 300 of them required (compiling and running the
// schema's validator and writing 300 patterned strings, about 3.5 s on one busy core).
const PROPERTIES = 4500;
const REQUIRED = 300;
const costlySchema = {
  type: 'object',
  additionalProperties: false,
  properties: Object.fromEntries(
    Array.from({ length: PROPERTIES }, (_, i) => [`f${i}`, { type: 'string', pattern: '^[a-z]{1,40}$' }]),
  ),
  required: Array.from({ length: REQUIRED }, (_, i) => `f${i}`),
};
const costly = {
  model: 'gpt-4.1-mini',
  messages: [{ role: 'user', content: 'Fill in the form' }],
  response_format: { type: 'json_schema', json_schema: { name: 'form', strict: true, schema: costlySchema } },
};
const plain = { model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 20 };

// Short enough for the test, long enough that the costly request is still being generated while
// another account's request is answered; the size limit set out of the way, so the time budget ends it.
const BUDGET_MS = 1500;

describe('a costly schema on the local model: the worker stays free and the request ends within its budget', function () {
  this.timeout(60_000);
  const start = rolesPerTest();
  let app: AppContext;
  let queues: AppContext;
  let patient: TestAccount;
  let other: TestAccount;
  let env: Record<string, string>;

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
  });
  beforeEach(async () => {
    env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '1000000',
      LOCAL_MODEL_GENERATION_BUDGET_MS: String(BUDGET_MS),
      LOCAL_MODEL_MAX_ANSWER_CHARS: '10000000',
    };
    queues = createContext(testConfig({ REDIS_PREFIX: env.REDIS_PREFIX! }), { role: 'test' });
    [patient, other] = await Promise.all([
      createTestAccount(app, { tier: 'paid' }),
      createTestAccount(app, { tier: 'paid' }),
    ]);
  });
  afterEach(async () => queues.close());
  after(async () => app.close());

  /** The costly request sent to the only worker, and the moment its job is taken there. */
  async function costlyInFlight(webUrl: string) {
    const answer = post(`${webUrl}/v1/chat/completions`, costly, { bearer: patient.apiKey }).then((r) => ({
      r,
      endedAt: performance.now(),
    }));
    await eventually(
      async () => {
        const active = await Promise.all(queues.completionQueues.map((q) => q.getActiveCount()));
        return active.some((n) => n > 0) ? true : undefined;
      },
      'the costly job to be running on the worker',
      15_000,
      10,
    );
    return { takenAt: performance.now(), answer };
  }

  it("answers another account's completion 200 within 2 s while a costly json_schema is generated on the only worker", async () => {
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const { answer } = await costlyInFlight(web.url);

    const askedAt = performance.now();
    const r: HttpResult = await post(`${web.url}/v1/chat/completions`, plain, {
      bearer: other.apiKey,
      signal: AbortSignal.timeout(15_000),
    });
    const answeredAt = performance.now();
    const costlyEnd = await answer;

    expect(r.status, r.text).to.equal(200);
    expect(r.body.choices[0].message.content).to.be.a('string').and.not.empty;
    expect(answeredAt - askedAt, 'latency of the other account').to.be.below(2000);
    // It was answered while the costly request was still running, not after it.
    expect(answeredAt).to.be.below(costlyEnd.endedAt);
  });

  it('ends the costly request with 400 generation_budget_exceeded within its budget, billed nothing', async () => {
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const { takenAt, answer } = await costlyInFlight(web.url);
    const { r, endedAt } = await answer;

    expect(r.status, `${r.status} ${r.text.slice(0, 300)}`).to.equal(400);
    expect(r.body.error).to.include({
      type: 'invalid_request_error',
      code: 'generation_budget_exceeded',
      param: 'response_format',
    });
    expect(r.body.error.message).to.match(/^The local model exceeded its generation budget/);
    // The budget counts from when a thread takes the request; a thread still loading when the
    // worker has just started, and the relay, come on top.
    expect(endedAt - takenAt, 'the costly request ended after the worker took it').to.be.below(BUDGET_MS + 2000);
    // Nothing reached the client, so nothing is billed: one failed row with no tokens.
    const rows = await eventually(async () => {
      const found = await usageRowsOf(app.db, patient.account.id);
      return found.length > 0 ? found : undefined;
    }, 'the failed request in the ledger');
    expect(rows.map((x) => [x.status, x.prompt_tokens, x.completion_tokens])).to.deep.equal([['failed', 0, 0]]);
  });
});
