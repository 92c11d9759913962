import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { request, type HttpResult } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

/**
 * What a key's own settings do when it makes a request: its allow-list (chat, Responses and the
 * models list), its expiry and disabled flag, on the chat route's cached path as on the others.
 * No worker runs: a request that passed admission is queued, then refused for want of a worker.
 */
describe('API key settings at admission', function () {
  this.timeout(30_000);
  const clock = new ManualClock(Date.now());
  let web: TestWeb;
  let other: TestWeb;
  let owner: TestAccount;

  before(async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), QUEUE_PICKUP_TIMEOUT_MS: '100' };
    web = await startTestWeb({ env, clock });
    other = await startTestWeb({ env, clock });
  });
  after(async () => {
    await Promise.all([web.close(), other.close()]);
  });
  beforeEach(async () => {
    owner = await createTestAccount(web.app, { tier: 'paid' });
  });

  const createKey = async (json: unknown) => {
    const r = await request('POST', `${web.url}/v1/keys`, { bearer: owner.jwt, json });
    expect(r.status, r.text).to.equal(201);
    return r.body as { id: string; api_key: string };
  };
  const patchKey = (id: string, json: unknown) =>
    request('PATCH', `${web.url}/v1/keys/${id}`, { bearer: owner.jwt, json });
  const chat = (key: string, model = 'gpt-4.1-mini', on = web) =>
    request('POST', `${on.url}/v1/chat/completions`, {
      bearer: key,
      json: { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5 },
    });
  const respond = (key: string, model: string) =>
    request('POST', `${web.url}/v1/responses`, { bearer: key, json: { model, input: 'hi', max_output_tokens: 16 } });
  const admitted = (r: HttpResult) => r.status === 503 && r.body?.error?.code === 'no_worker_available';
  const expectModelNotAllowed = (r: HttpResult, model: string) => {
    expect(r.status, r.text).to.equal(403);
    expect(r.body.error).to.include({ type: 'permission_error', code: 'model_not_allowed', param: 'model' });
    expect(r.body.error.message).to.include(model);
  };

  it('refuses a chat completion for a model outside the key’s allow-list with 403 model_not_allowed', async () => {
    const key = await createKey({ name: 'Mini only', models: ['gpt-4.1-mini'] });
    expect(admitted(await chat(key.api_key)), 'the allowed model').to.equal(true);
    expectModelNotAllowed(await chat(key.api_key, 'gemini-2.5-flash'), 'gemini-2.5-flash');
    // The account's default key has no allow-list.
    expect((await chat(owner.apiKey, 'gemini-2.5-flash')).status).not.to.equal(403);
  });

  it('refuses a Response for a model outside the key’s allow-list with 403 model_not_allowed', async () => {
    const key = await createKey({ name: 'Mini only', models: ['gpt-4.1-mini'] });
    expectModelNotAllowed(await respond(key.api_key, 'gemini-2.5-flash'), 'gemini-2.5-flash');
    expect(admitted(await respond(key.api_key, 'gpt-4.1-mini'))).to.equal(true);
  });

  it('lists in GET /v1/models only the models the key may use, and refuses one outside with 403', async () => {
    const key = await createKey({ name: 'Two models', models: ['gpt-4.1-mini', 'claude-haiku-4-5'] });
    const list = await request('GET', `${web.url}/v1/models`, { bearer: key.api_key });
    expect(list.body.data.map((m: { id: string }) => m.id).sort()).to.deep.equal(['claude-haiku-4-5', 'gpt-4.1-mini']);
    expectModelNotAllowed(
      await request('GET', `${web.url}/v1/models/gemini-2.5-flash`, { bearer: key.api_key }),
      'gemini-2.5-flash',
    );
    const all = await request('GET', `${web.url}/v1/models`, { bearer: owner.jwt });
    expect(all.body.data.length).to.be.greaterThan(2);
  });

  it('applies a widened allow-list on the next request of a process that had the key cached', async () => {
    const key = await createKey({ name: 'Mini only', models: ['gpt-4.1-mini'] });
    for (let i = 0; i < 2; i++) expect(admitted(await chat(key.api_key, 'gpt-4.1-mini', other))).to.equal(true);
    expect((await patchKey(key.id, { models: ['gpt-4.1-mini', 'gpt-4.1'] })).status).to.equal(200);
    expect(admitted(await chat(key.api_key, 'gpt-4.1', other))).to.equal(true);
    expect((await patchKey(key.id, { models: ['gpt-4.1'] })).status).to.equal(200);
    expectModelNotAllowed(await chat(key.api_key, 'gpt-4.1-mini', other), 'gpt-4.1-mini');
  });

  it('refuses a chat completion with a disabled key (401) on a process that had it cached', async () => {
    const key = await createKey({ name: 'Batch' });
    for (let i = 0; i < 2; i++) expect(admitted(await chat(key.api_key, 'gpt-4.1-mini', other))).to.equal(true);
    await patchKey(key.id, { disabled: true });
    const r = await chat(key.api_key, 'gpt-4.1-mini', other);
    expect(r.status).to.equal(401);
    expect(r.body.error).to.include({ type: 'authentication_error', code: 'invalid_api_key' });
    expect(r.body.error.message).to.match(/disabled/);
  });

  it('refuses a chat completion with an expired key (401), even from the cache', async () => {
    const key = await createKey({ name: 'Trial', expires_at: new Date(clock.now().getTime() + 60_000).toISOString() });
    for (let i = 0; i < 2; i++) expect(admitted(await chat(key.api_key))).to.equal(true);
    clock.advance(60_000);
    const r = await chat(key.api_key);
    expect(r.status).to.equal(401);
    expect(r.body.error).to.include({ type: 'authentication_error', code: 'invalid_api_key' });
    expect(r.body.error.message).to.match(/expired/);
  });

  it('refuses a key’s third request in a minute with its limit of 2 (429, Retry-After) while another key of the account still answers', async () => {
    const key = await createKey({ name: 'Slow', limits: { requests_per_minute: 2 } });
    const first = await chat(key.api_key);
    expect(admitted(first)).to.equal(true);
    // The key's window is the tighter: the headers show it, not the tier's 600 a minute.
    expect(first.headers.get('x-ratelimit-limit-requests')).to.equal('2');
    expect(first.headers.get('x-ratelimit-remaining-requests')).to.equal('1');
    expect(admitted(await chat(key.api_key, 'gpt-4.1-mini', other))).to.equal(true);
    const third = await chat(key.api_key);
    expect(third.status).to.equal(429);
    expect(third.body.error).to.include({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded' });
    expect(third.body.error.message).to.match(/this API key's requests \(its own limit of 2 per minute/);
    expect(Number(third.headers.get('retry-after'))).to.be.within(1, 60);
    expect(third.headers.get('x-ratelimit-remaining-requests')).to.equal('0');
    const another = await chat(owner.apiKey);
    expect(admitted(another)).to.equal(true);
    expect(another.headers.get('x-ratelimit-limit-requests')).to.equal('600');
    clock.advance(60_000);
    expect(admitted(await chat(key.api_key))).to.equal(true);
  });

  it('keeps the tier the ceiling across keys: 25 concurrent requests over 3 keys of a free account admit exactly 20', async () => {
    owner = await createTestAccount(web.app, { tier: 'free' });
    const keys = [owner.apiKey, (await createKey({ name: 'B' })).api_key, (await createKey({ name: 'C' })).api_key];
    const answers = await Promise.all(
      Array.from({ length: 25 }, (_, i) => chat(keys[i % 3]!, 'gemini-2.5-flash', i % 2 ? web : other)),
    );
    const refused = answers.filter((r) => r.status === 429);
    expect(refused).to.have.length(5);
    for (const r of refused) expect(r.body.error.code).to.equal('rate_limit_exceeded');
    expect(answers.filter((r) => r.status !== 429).map((r) => r.status)).to.deep.equal(Array(20).fill(503));
  });
});
