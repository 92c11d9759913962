import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import OpenAI, { NotFoundError } from 'openai';
import { ManualClock } from '../../src/clock.js';
import { saveStoredResponse } from '../../src/responses/stored-responses.repository.js';
import { storedUntil } from '../../src/responses/stored-responses.service.js';
import { JOBS } from '../../src/scheduler/jobs.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { get } from '../support/http.js';
import { openAiIssues } from '../support/openai-schemas.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const DAY = 86_400_000;

// Rows are written as the worker writes them at a response's end (saveStoredResponse); these tests
// are about reading them back, listing their input and deleting them, through the openai SDK.
describe('stored responses: retrieve, input_items and delete', () => {
  let web: TestWeb;
  const clock = new ManualClock(Date.now());
  let owner: TestAccount;
  let other: TestAccount;
  const client = (who: TestAccount) => new OpenAI({ apiKey: who.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });

  const responseObject = (id: string, text: string) => ({
    id,
    object: 'response',
    created_at: Math.floor(clock.now().getTime() / 1000),
    status: 'completed',
    model: 'local-echo',
    output: [
      {
        type: 'message',
        id: `msg_${id.slice(5)}`,
        status: 'completed',
        role: 'assistant',
        content: [{ type: 'output_text', text, annotations: [], logprobs: [] }],
      },
    ],
    usage: {
      input_tokens: 5,
      input_tokens_details: { cached_tokens: 0, cache_write_tokens: 0 },
      output_tokens: 2,
      output_tokens_details: { reasoning_tokens: 0 },
      total_tokens: 7,
      cost: 0,
    },
    error: null,
    incomplete_details: null,
    instructions: null,
    metadata: {},
    parallel_tool_calls: true,
    temperature: 1,
    top_p: 1,
    tool_choice: 'auto',
    tools: [],
  });
  const inputItems = (n: number) =>
    Array.from({ length: n }, (_, i) => ({
      id: `msg_in${i}`,
      type: 'message',
      role: 'user',
      status: 'completed',
      content: [{ type: 'input_text', text: `question ${i}` }],
    }));

  /** A stored response of `who`'s, created now, with `n` input items. */
  async function stored(who: TestAccount, n = 3, text = 'Hello there') {
    const id = `resp_${randomBytes(12).toString('hex')}`;
    const response = responseObject(id, text);
    await saveStoredResponse(web.app.db, {
      id,
      accountId: who.account.id,
      status: 'completed',
      response,
      inputItems: inputItems(n),
      now: clock.now(),
      expiresAt: storedUntil(web.app.config, clock.now()),
    });
    return { id, response };
  }
  const rowsWithId = (id: string) =>
    web.app.db.selectFrom('stored_responses').select('id').where('id', '=', id).execute();

  before(async () => {
    web = await startTestWeb({ clock });
    owner = await createTestAccount(web.app);
    other = await createTestAccount(web.app);
  });
  after(async () => {
    await web.close();
  });

  it('answers retrieve with the stored object, whose output_text the SDK puts together', async () => {
    const { id, response } = await stored(owner);
    const got = await client(owner).responses.retrieve(id);
    expect(got.id).to.equal(id);
    expect(got.output_text).to.equal('Hello there');
    expect(got.usage).to.deep.equal(response.usage);
    const { output_text: _, ...wire } = got as unknown as Record<string, unknown>;
    expect(openAiIssues('Response', wire)).to.deep.equal([]);
  });

  it("answers 404 in OpenAI's envelope for another account's response and for an unknown id", async () => {
    const { id } = await stored(owner);
    for (const [who, asked] of [
      [other, id],
      [owner, 'resp_unknown'],
    ] as const) {
      const r = await get(`${web.url}/v1/responses/${asked}`, { bearer: who.apiKey });
      expect(r.status).to.equal(404);
      expect(r.body).to.deep.equal({
        error: {
          message: `Response with id '${asked}' not found.`,
          type: 'not_found_error',
          param: 'response_id',
          code: null,
        },
      });
    }
  });

  it('lists input items newest first by default, a page at a time with after', async () => {
    const { id } = await stored(owner, 5);
    const first = await client(owner).responses.inputItems.list(id, { limit: 2 });
    expect(first.data.map((i) => i.id)).to.deep.equal(['msg_in4', 'msg_in3']);
    expect(first.has_more).to.equal(true);
    const r = await get(`${web.url}/v1/responses/${id}/input_items?limit=2&after=msg_in3`, { bearer: owner.apiKey });
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.include({ object: 'list', first_id: 'msg_in2', last_id: 'msg_in1', has_more: true });
    expect(openAiIssues('ResponseItemList', r.body)).to.deep.equal([]);
  });

  it('lists every input item oldest first with order=asc, through the SDK auto-paging', async () => {
    const { id } = await stored(owner, 5);
    const ids: string[] = [];
    for await (const item of client(owner).responses.inputItems.list(id, { order: 'asc', limit: 2 })) ids.push(item.id);
    expect(ids).to.deep.equal(['msg_in0', 'msg_in1', 'msg_in2', 'msg_in3', 'msg_in4']);
  });

  it('answers 404 naming after when it names no item of the response, and 422 for a limit past 100', async () => {
    const { id } = await stored(owner, 2);
    const unknown = await get(`${web.url}/v1/responses/${id}/input_items?after=msg_nope`, { bearer: owner.apiKey });
    expect(unknown.status).to.equal(404);
    expect(unknown.body.error.param).to.equal('after');
    const tooMany = await get(`${web.url}/v1/responses/${id}/input_items?limit=101`, { bearer: owner.apiKey });
    expect(tooMany.status).to.equal(422);
    expect(tooMany.body.detail[0].loc).to.deep.equal(['query', 'limit']);
  });

  it('deletes a response: the answer says so, the row is gone and the id answers 404 after', async () => {
    const { id } = await stored(owner);
    const deleted = await client(owner).delete(`/responses/${id}`);
    expect(deleted).to.deep.equal({ id, object: 'response', deleted: true });
    expect(await rowsWithId(id)).to.have.length(0);
    let error: unknown;
    await client(owner)
      .responses.retrieve(id)
      .catch((e: unknown) => (error = e));
    expect(error).to.be.instanceOf(NotFoundError);
  });

  it("leaves another account's response in place when that account asks to delete it", async () => {
    const { id } = await stored(owner);
    let error: unknown;
    await client(other)
      .responses.delete(id)
      .catch((e: unknown) => (error = e));
    expect(error).to.be.instanceOf(NotFoundError);
    expect(await rowsWithId(id)).to.have.length(1);
  });

  it('stops answering a response past RESPONSES_RETENTION_DAYS, and the daily responses job deletes only those', async () => {
    const old = await stored(owner);
    clock.advance(web.app.config.responses.retentionDays * DAY - 1000);
    const young = await stored(owner);
    expect((await get(`${web.url}/v1/responses/${old.id}`, { bearer: owner.apiKey })).status).to.equal(200);
    clock.advance(2000);
    expect((await get(`${web.url}/v1/responses/${old.id}`, { bearer: owner.apiKey })).status).to.equal(404);
    const r = await JOBS.responses.run(web.app, clock.now().toISOString().slice(0, 10), {});
    expect(r.ok).to.equal(true);
    expect(await rowsWithId(old.id)).to.have.length(0);
    expect(await rowsWithId(young.id)).to.have.length(1);
  });

  it("spends the account's completion reads: past COMPLETION_READS_PER_MINUTE a read is 429, another account's are not", async () => {
    const limited = await startTestWeb({ clock, env: { COMPLETION_READS_PER_MINUTE: '3' } });
    try {
      // Accounts of their own: the clock stands still, so the others' reads are in this minute too.
      const [reader, bystander] = [await createTestAccount(limited.app), await createTestAccount(limited.app)];
      const { id } = await stored(reader);
      const reads = [
        () => get(`${limited.url}/v1/responses/${id}`, { bearer: reader.apiKey }),
        () => get(`${limited.url}/v1/responses/${id}/input_items`, { bearer: reader.apiKey }),
        () => get(`${limited.url}/v1/responses/resp_unknown`, { bearer: reader.apiKey }),
      ];
      const statuses = [];
      for (const read of reads) statuses.push((await read()).status);
      expect(statuses).to.deep.equal([200, 200, 404]);
      const refused = await get(`${limited.url}/v1/responses/${id}`, { bearer: reader.apiKey });
      expect(refused.status).to.equal(429);
      expect(refused.body.error.code).to.equal('rate_limit_exceeded');
      expect(Number(refused.headers.get('retry-after'))).to.be.within(1, 60);
      const elsewhere = await get(`${limited.url}/v1/responses/resp_unknown`, { bearer: bystander.apiKey });
      expect(elsewhere.status).to.equal(404);
    } finally {
      await limited.close();
    }
  });
});
