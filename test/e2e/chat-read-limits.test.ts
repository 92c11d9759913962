import { expect } from 'chai';
import OpenAI, { RateLimitError } from 'openai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { openStream } from '../support/sse.js';

// Reading a completion back costs the service a Redis read, or a relay log replayed and followed:
// an account's reads are counted per minute, and one completion is followed by a bounded number of
// resumed streams at once, on every web process together. The clock is stopped (TEST_CLOCK_AT),
// so the minute never rolls over under the test.

const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Tell me a long story' }] };
const idOf = (events: readonly string[]): string => (JSON.parse(events[0]!) as { id: string }).id;

describe('reading completions back is limited per account (two web processes, one worker)', function () {
  this.timeout(60_000);
  const READS_PER_MINUTE = 20;
  const env = {
    REDIS_PREFIX: isolatedPrefix(),
    TEST_CLOCK_AT: '2026-11-02T12:00:00Z',
    LOCAL_MODEL_TTFT_MS: '0',
    // 100 tokens at 5 a second: the stream runs on for 20 s while its readers come and go.
    LOCAL_MODEL_TOKENS_PER_SECOND: '5',
    COMPLETION_READS_PER_MINUTE: String(READS_PER_MINUTE),
    RESUME_MAX_READERS: '2',
  };
  let app: AppContext;
  let webs: RoleProcess[];
  let worker: RoleProcess;

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    [webs, worker] = await Promise.all([
      Promise.all([startRole('web', env), startRole('web', env)]),
      startRole('worker', env),
    ]);
  });
  after(async () => {
    await Promise.all([...(webs ?? []), worker].map((p) => p?.stop()));
    await app?.close();
  });

  /** A resumed stream of `id` on `web`, open until aborted: its status once its headers arrived. */
  async function follow(web: RoleProcess, account: TestAccount, id: string) {
    const controller = new AbortController();
    const res = await fetch(`${web.url}/v1/chat/completions/${id}/stream`, {
      headers: { authorization: `Bearer ${account.apiKey}` },
      signal: controller.signal,
    });
    const body = res.status === 200 ? undefined : ((await res.json()) as { error: { type: string; code: string } });
    return { status: res.status, headers: res.headers, body, close: () => controller.abort() };
  }

  it('refuses a resumed stream past RESUME_MAX_READERS, counting readers on every web process, and admits one after a reader closes', async () => {
    const account = await createTestAccount(app, { tier: 'paid' });
    const live = openStream(`${webs[0]!.url}/v1/chat/completions`, account.apiKey, { ...ask, max_tokens: 100 });
    await live.waitFor(1);
    const id = idOf(live.events);
    const first = await follow(webs[0]!, account, id);
    const second = await follow(webs[1]!, account, id);
    expect([first.status, second.status]).to.deep.equal([200, 200]);

    const third = await follow(webs[0]!, account, id);
    expect(third.status).to.equal(429);
    expect(third.headers.get('retry-after')).to.equal('2');
    expect(third.body!.error).to.include({ type: 'rate_limit_exceeded', code: 'too_many_readers' });

    first.close();
    const admitted = await eventually(async () => {
      const next = await follow(webs[1]!, account, id);
      if (next.status === 200) return next;
      expect(next.body!.error.code).to.equal('too_many_readers');
      return undefined;
    }, 'a reader admitted once one closed');
    expect(admitted.status).to.equal(200);
    for (const s of [second, admitted]) s.close();
    live.controller.abort();
  });

  it('refuses a burst of reads past COMPLETION_READS_PER_MINUTE with 429 and Retry-After, while another account reads on', async () => {
    const [burst, other] = await Promise.all([1, 2].map(() => createTestAccount(app, { tier: 'paid' })));
    const answered = await Promise.all(
      [burst!, other!].map((a) =>
        post(`${webs[0]!.url}/v1/chat/completions`, { ...ask, max_tokens: 2 }, { bearer: a.apiKey }),
      ),
    );
    const [burstId, otherId] = answered.map((r) => (r.body as { id: string }).id) as [string, string];

    for (let i = 1; i <= READS_PER_MINUTE; i++) {
      // Alternating web processes and both kinds of read: one budget for all of them.
      const web = webs[i % 2]!;
      const r =
        i % 4 === 0
          ? await get(`${web.url}/v1/chat/completions/chatcmpl-unknown`, { bearer: burst!.apiKey })
          : await get(`${web.url}/v1/chat/completions/${burstId}`, { bearer: burst!.apiKey });
      expect(r.status, `read ${i}`).to.equal(i % 4 === 0 ? 404 : 200);
      expect(r.headers.get('x-ratelimit-remaining'), `read ${i}`).to.equal(String(READS_PER_MINUTE - i));
    }

    // The stopped clock is at the start of a minute: the whole minute is left to wait.
    const sdk = new OpenAI({ apiKey: burst!.apiKey, baseURL: `${webs[1]!.url}/v1`, maxRetries: 0 });
    const refused = await sdk.chat.completions.retrieve(burstId).catch((err: unknown) => err);
    expect(refused).to.be.instanceOf(RateLimitError);
    const error = refused as RateLimitError;
    expect([error.status, error.code, error.headers?.get('retry-after')]).to.deep.equal([
      429,
      'rate_limit_exceeded',
      '60',
    ]);
    expect(error.message).to.match(new RegExp(`\\(${READS_PER_MINUTE} per minute, retrievals and resumed streams`));
    const resumed = await get(`${webs[0]!.url}/v1/chat/completions/${burstId}/stream`, { bearer: burst!.apiKey });
    expect([resumed.status, resumed.headers.get('x-ratelimit-remaining')]).to.deep.equal([429, '0']);

    const unaffected = await get(`${webs[1]!.url}/v1/chat/completions/${otherId}`, { bearer: other!.apiKey });
    expect([unaffected.status, unaffected.body.id]).to.deep.equal([200, otherId]);
    expect(unaffected.headers.get('x-ratelimit-remaining')).to.equal(String(READS_PER_MINUTE - 1));
  });
});
