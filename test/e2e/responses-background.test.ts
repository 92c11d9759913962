import { expect } from 'chai';
import OpenAI from 'openai';
import type { Response as OpenAiResponse } from 'openai/resources/responses/responses';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { rolesPerTest, type RoleProcess } from '../support/processes.js';
import { openAiIssues } from '../support/openai-schemas.js';
import { openGetStream, openStream } from '../support/sse.js';

// Background responses (background: true) through web and worker processes and the built-in local
// model, read by the official openai SDK: answered queued at once, run on the queue with nobody
// attached, followed by retrieve, stopped by cancel, every answer held to OpenAI's Response schema.
describe('background responses through web and worker processes (built-in local model)', () => {
  let app: AppContext;
  const start = rolesPerTest();

  before(() => {
    app = createContext(testConfig(), { role: 'test' });
  });
  after(async () => app.close());

  /** A web and a worker process whose local model writes `tokensPerSecond`, and an SDK client of a new paid account. */
  async function setUp(tokensPerSecond: string): Promise<{ web: RoleProcess; account: TestAccount; client: OpenAI }> {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: tokensPerSecond,
    };
    const account = await createTestAccount(app, { tier: 'paid' });
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const client = new OpenAI({ apiKey: account.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    return { web, account, client };
  }

  type StreamEvent = { type: string; sequence_number: number; delta?: string; response?: Record<string, unknown> };
  const deltas = (events: StreamEvent[]) =>
    events
      .filter((e) => e.type === 'response.output_text.delta')
      .map((e) => e.delta)
      .join('');

  const usageRow = (id: string) =>
    eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', id).executeTakeFirst(),
      'the usage row',
    );

  /** Retrieves the response until its status is `status`. */
  const retrievedAs = (client: OpenAI, id: string, status: string) =>
    eventually(async () => {
      const r = await client.responses.retrieve(id);
      return r.status === status ? r : undefined;
    }, `the response ${status}`);

  it('answers queued at once and is retrieved completed, its usage the ledger row', async () => {
    const { client } = await setUp('5000');
    const created = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: 'Say hello',
      background: true,
    });
    expect(openAiIssues('Response', created)).to.deep.equal([]);
    expect(created.id).to.match(/^resp_/);
    expect(created.status).to.equal('queued');
    expect(created.background).to.equal(true);
    expect(created.output).to.deep.equal([]);

    const done = await retrievedAs(client, created.id, 'completed');
    expect(openAiIssues('Response', done)).to.deep.equal([]);
    expect(done.background).to.equal(true);
    expect(done.output_text).to.be.a('string').that.is.not.empty;
    const row = await usageRow(created.id);
    expect(row.status).to.equal('completed');
    expect([row.prompt_tokens, row.completion_tokens]).to.deep.equal([
      done.usage!.input_tokens,
      done.usage!.output_tokens,
    ]);
    const stored = await app.db
      .selectFrom('stored_responses')
      .select('status')
      .where('id', '=', created.id)
      .executeTakeFirstOrThrow();
    expect(stored.status).to.equal('completed');
  });

  it('is cancelled mid-answer: it ends cancelled, billed the tokens it produced', async () => {
    // 20 tokens a second: 400 tokens take twenty seconds, time enough to cancel mid-answer.
    const { web, account, client } = await setUp('20');
    const created = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: 'Tell me a long story',
      max_output_tokens: 400,
      background: true,
    });
    expect(created.status).to.equal('queued');
    // Its stream, from its relay log, once a worker has claimed it: text is being produced once a delta is there.
    await retrievedAs(client, created.id, 'in_progress');
    const s = openGetStream(`${web.url}/v1/responses/${created.id}?stream=true`, account.apiKey);
    await s.waitFor(5);
    s.controller.abort();
    await s.finished;

    const cancelled = await client.responses.cancel(created.id);
    expect(openAiIssues('Response', cancelled)).to.deep.equal([]);
    expect(cancelled.status).to.equal('cancelled');

    const row = await usageRow(created.id);
    expect(row.status).to.equal('cancelled');
    expect(row.completion_tokens).to.be.greaterThan(0).and.lessThan(400);
    // The worker's end fills in what was produced, its usage the ledger's.
    const ended: OpenAiResponse = await eventually(async () => {
      const r = await client.responses.retrieve(created.id);
      return r.usage ? r : undefined;
    }, 'the cancelled response with its usage');
    expect(openAiIssues('Response', ended)).to.deep.equal([]);
    expect(ended.status).to.equal('cancelled');
    expect(ended.usage!.output_tokens).to.equal(row.completion_tokens);
    expect(ended.output_text).to.be.a('string').that.is.not.empty;
    // Cancelling it again answers it as it is.
    const again = await client.responses.cancel(created.id);
    expect([again.status, again.output, again.usage]).to.deep.equal([ended.status, ended.output, ended.usage]);
  });

  /**
   * A background response whose worker is SIGKILLed once its stream has carried some text, with a
   * web process and, once `meanwhile` has run, a fresh worker to take its job over.
   */
  async function workerKilledMidAnswer(meanwhile: (client: OpenAI, id: string) => Promise<unknown> = async () => {}) {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '20',
      QUEUE_STALLED_INTERVAL_MS: '500',
    };
    const account = await createTestAccount(app, { tier: 'paid' });
    const web = await start('web', env);
    const first = await start('worker', env);
    const client = new OpenAI({ apiKey: account.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const created = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: 'Tell me a long story',
      max_output_tokens: 400,
      background: true,
    });
    await retrievedAs(client, created.id, 'in_progress');
    const s = openGetStream(`${web.url}/v1/responses/${created.id}?stream=true`, account.apiKey);
    await s.waitFor(6);
    s.controller.abort();
    await s.finished;
    await first.stop('SIGKILL');
    await meanwhile(client, created.id);
    await start('worker', env);
    return { client, id: created.id };
  }

  const usageRows = (id: string) =>
    eventually(async () => {
      const found = await app.db.selectFrom('usage_events').selectAll().where('request_id', '=', id).execute();
      return found.length > 0 ? found : undefined;
    }, 'the usage row');

  it('survives its worker dying mid-answer: it ends failed with the text produced, billed once as its usage says', async () => {
    const { client, id } = await workerKilledMidAnswer();
    const ended = await retrievedAs(client, id, 'failed');
    expect(openAiIssues('Response', ended)).to.deep.equal([]);
    expect(ended.error).to.include({ code: 'server_error' });
    const rows = await usageRows(id);
    expect(rows).to.have.length(1);
    expect(rows[0]!.status).to.equal('failed');
    expect(rows[0]!.completion_tokens).to.be.greaterThan(0);
    expect(ended.output_text).to.be.a('string').that.is.not.empty;
    expect([ended.usage?.input_tokens, ended.usage?.output_tokens]).to.deep.equal([
      rows[0]!.prompt_tokens,
      rows[0]!.completion_tokens,
    ]);
  });

  it('cancelled while its dead worker held it: it stays cancelled and is stored with the text produced, billed as its usage says', async () => {
    const { client, id } = await workerKilledMidAnswer(async (c, responseId) => {
      const cancelled = await c.responses.cancel(responseId);
      expect(cancelled.status).to.equal('cancelled');
    });
    const rows = await usageRows(id);
    expect(rows).to.have.length(1);
    expect(rows[0]!.completion_tokens).to.be.greaterThan(0);
    const ended = await client.responses.retrieve(id);
    expect(openAiIssues('Response', ended)).to.deep.equal([]);
    expect(ended.status).to.equal('cancelled');
    expect(ended.output_text).to.be.a('string').that.is.not.empty;
    expect([ended.usage?.input_tokens, ended.usage?.output_tokens]).to.deep.equal([
      rows[0]!.prompt_tokens,
      rows[0]!.completion_tokens,
    ]);
  });

  it('survives its worker dying between its answer and its record: it is stored as answered, its usage the ledger row', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
      QUEUE_STALLED_INTERVAL_MS: '500',
    };
    const account = await createTestAccount(app, { tier: 'paid' });
    const web = await start('web', env);
    const doomed = await start('worker', { ...env, FAULT_INJECT: 'crash-before-record' });
    const client = new OpenAI({ apiKey: account.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const created = await client.responses.create({
      model: 'gemini-2.5-flash',
      input: 'Tell me a long story',
      max_output_tokens: 30,
      background: true,
    });
    // The whole answer was relayed and its usage logged; then the worker died before storing and recording it.
    expect(await doomed.exited).to.equal(null);
    await start('worker', env);
    const ended = await retrievedAs(client, created.id, 'incomplete');
    expect(openAiIssues('Response', ended)).to.deep.equal([]);
    expect(ended.output_text).to.be.a('string').that.is.not.empty;
    const rows = await usageRows(created.id);
    expect(rows).to.have.length(1);
    expect([ended.usage?.input_tokens, ended.usage?.output_tokens]).to.deep.equal([
      rows[0]!.prompt_tokens,
      rows[0]!.completion_tokens,
    ]);
    expect(rows[0]!.completion_tokens).to.equal(30);
  });

  it('streamed in the background, runs to its end after its client drops the stream, which resumes from where it was cut', async () => {
    // 20 tokens a second: 40 tokens take two seconds, time enough to drop the stream mid-answer.
    const { web, account, client } = await setUp('20');
    const s = openStream(`${web.url}/v1/responses`, account.apiKey, {
      model: 'gemini-2.5-flash',
      input: 'Tell me a story',
      max_output_tokens: 40,
      background: true,
    });
    await s.waitFor(6);
    s.controller.abort();
    await s.finished;
    const before = s.events.map((e) => JSON.parse(e) as StreamEvent);
    expect(before[0]!.type).to.equal('response.created');
    expect(before[0]!.response!.background).to.equal(true);
    const id = before[0]!.response!.id as string;

    // Nobody is attached, and the job goes on: a background response is stopped only by a cancel.
    const done = await eventually(async () => {
      const r = await client.responses.retrieve(id);
      return r.status === 'completed' || r.status === 'incomplete' ? r : undefined;
    }, 'the response ended');
    const last = before.at(-1)!.sequence_number;
    const resumed = openGetStream(`${web.url}/v1/responses/${id}?stream=true&starting_after=${last}`, account.apiKey);
    await resumed.finished;
    const after = resumed.events.map((e) => JSON.parse(e) as StreamEvent);
    expect(after.map((e) => e.sequence_number)).to.deep.equal(after.map((_, i) => last + 1 + i));
    expect(after.at(-1)!.type).to.equal(`response.${done.status}`);
    const stored = await get(`${web.url}/v1/responses/${id}`, { bearer: account.apiKey });
    expect(after.at(-1)!.response).to.deep.equal(stored.body);
    expect(deltas(before) + deltas(after)).to.equal(done.output_text);
    const row = await usageRow(id);
    expect([row.status, row.completion_tokens]).to.deep.equal(['completed', done.usage!.output_tokens]);
  });

  it('a stream read while the response is still queued waits for a worker to start it, then follows it from its first event', async () => {
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
      QUEUE_PICKUP_TIMEOUT_MS: '60000',
    };
    const account = await createTestAccount(app, { tier: 'paid' });
    const web = await start('web', env);
    const client = new OpenAI({ apiKey: account.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const created = await client.responses.create({ model: 'gemini-2.5-flash', input: 'Say hello', background: true });
    expect(created.status).to.equal('queued');
    const s = openGetStream(`${web.url}/v1/responses/${created.id}?stream=true`, account.apiKey);
    await start('worker', env);
    await s.finished;
    const events = s.events.map((e) => JSON.parse(e) as StreamEvent);
    expect(events.map((e) => e.sequence_number)).to.deep.equal(events.map((_, i) => i));
    expect(events[0]!.type).to.equal('response.created');
    expect(events.at(-1)!.type).to.equal('response.completed');
    const stored = await get(`${web.url}/v1/responses/${created.id}`, { bearer: account.apiKey });
    expect(events.at(-1)!.response).to.deep.equal(stored.body);
    const row = await usageRow(created.id);
    expect(row.completion_tokens).to.equal((stored.body.usage as { output_tokens: number }).output_tokens);
  });

  it('stays queued while no worker runs: its stream answers 503 no_worker, and once cancelled 400 response_not_streamed', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), QUEUE_PICKUP_TIMEOUT_MS: '300' };
    const account = await createTestAccount(app, { tier: 'paid' });
    const web = await start('web', env);
    const client = new OpenAI({ apiKey: account.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const created = await client.responses.create({ model: 'gemini-2.5-flash', input: 'Say hello', background: true });
    const waiting = await get(`${web.url}/v1/responses/${created.id}?stream=true`, { bearer: account.apiKey });
    expect(waiting.status).to.equal(503);
    expect(waiting.headers.get('retry-after')).to.equal('1');
    expect(waiting.body.error).to.include({ code: 'no_worker' });
    expect((await client.responses.retrieve(created.id)).status).to.equal('queued');

    expect((await client.responses.cancel(created.id)).status).to.equal('cancelled');
    const ended = await get(`${web.url}/v1/responses/${created.id}?stream=true`, { bearer: account.apiKey });
    expect(ended.status).to.equal(400);
    expect(openAiIssues('ErrorResponse', ended.body)).to.deep.equal([]);
    expect(ended.body.error).to.include({ code: 'response_not_streamed', param: 'stream' });
    const rows = await app.db.selectFrom('usage_events').select('id').where('request_id', '=', created.id).execute();
    expect(rows).to.deep.equal([]);
  });

  it('refuses background with store: false with a 400 naming store', async () => {
    const { web, account } = await setUp('5000');
    const r = await post(
      `${web.url}/v1/responses`,
      { model: 'gemini-2.5-flash', input: 'Hi', background: true, store: false },
      { bearer: account.apiKey },
    );
    expect(r.status).to.equal(400);
    expect(openAiIssues('ErrorResponse', r.body)).to.deep.equal([]);
    expect(r.body.error).to.include({ param: 'store', type: 'invalid_request_error' });
    const rows = await app.db
      .selectFrom('usage_events')
      .select('request_id')
      .where('account_id', '=', account.account.id)
      .execute();
    expect(rows).to.deep.equal([]);
  });

  it('refuses to cancel a response that was not made in the background with a 400, and an unknown one with a 404', async () => {
    const { web, account, client } = await setUp('5000');
    const r = await client.responses.create({ model: 'gemini-2.5-flash', input: 'Say hello' });
    const refused = await post(`${web.url}/v1/responses/${r.id}/cancel`, undefined, { bearer: account.apiKey });
    expect(refused.status).to.equal(400);
    expect(openAiIssues('ErrorResponse', refused.body)).to.deep.equal([]);
    expect(refused.body.error).to.include({ code: 'response_not_background', param: 'response_id' });
    const stored = await get(`${web.url}/v1/responses/${r.id}`, { bearer: account.apiKey });
    expect(stored.body.status).to.equal('completed');
    const unknown = await post(`${web.url}/v1/responses/resp_nope/cancel`, undefined, { bearer: account.apiKey });
    expect(unknown.status).to.equal(404);
  });
});
