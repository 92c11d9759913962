import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { rolesPerTest, type RoleProcess } from '../support/processes.js';
import { openStream } from '../support/sse.js';

// A client that closes its connection before the response is complete is recorded as 499 (nginx's
// "client closed request") in the access log and in http_requests_total: not Koa's default 404 for
// a request still waiting on its answer, nor the 200 a stream had started with.

interface AccessLine {
  msg: string;
  path?: string;
  status?: number;
  code?: string;
  requestId?: string;
}

const accessLines = (web: RoleProcess): AccessLine[] =>
  web
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as AccessLine)
    .filter((l) => l.msg === 'request' && l.path === '/v1/chat/completions');

async function completionsCounted(web: RoleProcess, status: string): Promise<number> {
  const text = await (await fetch(`${web.url}/metrics`, { headers: { accept: 'text/plain' } })).text();
  const line = text
    .split('\n')
    .find(
      (l) =>
        l.startsWith('http_requests_total{') &&
        l.includes('route="/v1/chat/completions"') &&
        l.includes(`status="${status}"`),
    );
  return line ? Number(line.split(' ').at(-1)) : 0;
}

describe('the access log and request counter for a client that closed its connection', function () {
  this.timeout(60_000);
  let app: AppContext;
  let account: TestAccount;
  const start = rolesPerTest();

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
  });
  beforeEach(async () => {
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  // 20 tokens a second: a 400-token answer would take 20 s, so the client always leaves first.
  const env = () => ({ REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '20' });
  const ask = {
    model: 'gemini-2.5-flash',
    messages: [{ role: 'user', content: 'Tell me a long story' }],
    max_tokens: 400,
  };

  it('records a whole-answer request whose client left while it waited as 499, not 404', async () => {
    const e = env();
    const [web] = await Promise.all([start('web', e), start('worker', e)]);
    const controller = new AbortController();
    const answer = fetch(`${web.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${account.apiKey}` },
      body: JSON.stringify(ask),
      signal: controller.signal,
    });
    // The worker has started producing the answer: the request is in flight when its client leaves.
    await eventually(
      async () => ((await app.redis.keys(`${e.REDIS_PREFIX}:req:*`)).length > 0 ? true : undefined),
      'a worker to claim the job',
    );
    controller.abort();
    await answer.catch(() => undefined);

    const line = await eventually(async () => accessLines(web)[0], 'the access log line');
    expect(line).to.include({ status: 499, code: 'client_closed_request' });
    expect(await completionsCounted(web, '499')).to.equal(1);
    expect(await completionsCounted(web, '404')).to.equal(0);
  });

  it('records a stream whose client left mid-way as 499, not the 200 it started with', async () => {
    const e = env();
    const [web] = await Promise.all([start('web', e), start('worker', e)]);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask);
    await s.waitFor(3);
    s.controller.abort();
    await s.finished;

    const line = await eventually(async () => accessLines(web)[0], 'the access log line');
    expect(line).to.include({ status: 499, code: 'client_closed_request' });
    expect(await completionsCounted(web, '499')).to.equal(1);
    expect(await completionsCounted(web, '200')).to.equal(0);
  });

  it('records a stream read to its end as 200', async () => {
    const e = env();
    const [web] = await Promise.all([start('web', e), start('worker', e)]);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, max_tokens: 5 });
    await s.finished;
    expect(s.events.at(-1)).to.equal('[DONE]');

    // A 2xx is logged at debug level: the counter is the record here, counted as the response finishes.
    await eventually(
      async () => ((await completionsCounted(web, '200')) === 1 ? true : undefined),
      'the stream counted as 200',
    );
    expect(await completionsCounted(web, '499')).to.equal(0);
  });
});
