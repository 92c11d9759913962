import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { freePort } from '../support/private-redis.js';
import { rolesPerTest } from '../support/processes.js';
import { openStream, postStream } from '../support/sse.js';

/** The value of one Prometheus sample in a scrape (the name, and these labels among its own), or undefined. */
function sample(text: string, name: string, labels = ''): number | undefined {
  const line = text.split('\n').find((l) => {
    const bare = l.split(/[{ ]/, 1)[0];
    return bare === name && (labels === '' || l.includes(labels));
  });
  return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
}

describe('a worker’s /metrics, for operators who scale workers', () => {
  let app: AppContext;
  let account: TestAccount;
  const start = rolesPerTest();
  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  it('serves its jobs, queue wait, upstream timing by provider and model, cancellations and metering lag in Prometheus text on WORKER_METRICS_PORT', async () => {
    const port = await freePort();
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '20' };
    const [web] = await Promise.all([
      start('web', env),
      start('worker', { ...env, WORKER_METRICS_PORT: String(port) }),
    ]);
    const url = `${web.url}/v1/chat/completions`;
    const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 };
    expect((await postStream(url, ask, account.apiKey)).events.at(-1)).to.equal('[DONE]');
    const left = openStream(url, account.apiKey, { ...ask, max_tokens: 200 });
    await left.waitFor(2);
    left.controller.abort();
    await left.finished;

    const scrape = () =>
      fetch(`http://127.0.0.1:${port}/metrics`).then(async (r) => ({
        status: r.status,
        type: r.headers.get('content-type') ?? '',
        text: await r.text(),
      }));
    const m = await eventually(async () => {
      const s = await scrape();
      return (sample(s.text, 'completion_jobs_finished_total', 'outcome="cancelled"') ?? 0) >= 1 ? s : undefined;
    }, 'the cancelled job in the worker’s metrics');
    expect(m.status).to.equal(200);
    expect(m.type).to.match(/^text\/plain/);
    expect(sample(m.text, 'completion_jobs_started_total')).to.equal(2);
    expect(sample(m.text, 'completion_jobs_finished_total', 'outcome="completed"')).to.equal(1);
    expect(sample(m.text, 'completion_cancellations_total', 'cause="client_cancelled"')).to.equal(1);
    expect(sample(m.text, 'completion_jobs_active')).to.equal(0);
    expect(sample(m.text, 'completion_queue_wait_seconds_count')).to.equal(2);
    expect(
      sample(m.text, 'completion_upstream_ttft_seconds_count', 'provider="gemini",model="gemini-2.5-flash"'),
    ).to.equal(1);
    expect(
      sample(m.text, 'completion_upstream_tokens_per_second_count', 'provider="gemini",model="gemini-2.5-flash"'),
    ).to.equal(1);
    expect(sample(m.text, 'relay_publish_failures_total')).to.equal(0);
    expect(m.text).to.match(/^usage_metering_lag_seconds/m);
    expect(m.text).to.match(/^process_cpu_seconds_total/m);
  });

  it('times on the web process each stream’s first token as its client sees it, from the request’s arrival, which includes the upstream’s', async () => {
    const port = await freePort();
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '60', LOCAL_MODEL_TOKENS_PER_SECOND: '200' };
    const [web] = await Promise.all([
      start('web', env),
      start('worker', { ...env, WORKER_METRICS_PORT: String(port) }),
    ]);
    const url = `${web.url}/v1/chat/completions`;
    const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'hello' }], max_tokens: 5 };
    expect((await postStream(url, ask, account.apiKey)).events.at(-1)).to.equal('[DONE]');
    const text = async (u: string) => (await fetch(u, { headers: { accept: 'text/plain' } })).text();
    const upstreamLabel = 'provider="gemini",model="gemini-2.5-flash"';
    // The worker observes the upstream's timing as the job settles, which may come after the client's [DONE].
    const upstream = await eventually(async () => {
      const t = await text(`http://127.0.0.1:${port}/metrics`);
      return sample(t, 'completion_upstream_ttft_seconds_count', upstreamLabel) === 1
        ? sample(t, 'completion_upstream_ttft_seconds_sum', upstreamLabel)
        : undefined;
    }, 'the stream’s upstream timing in the worker’s metrics');
    // A JSON answer has no first token to time.
    const json = await fetch(url, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify(ask),
    });
    expect(json.status).to.equal(200);
    await json.text();
    const webText = await text(`${web.url}/metrics`);
    const label = 'model="gemini-2.5-flash"';
    expect(sample(webText, 'completion_client_ttft_seconds_count', label)).to.equal(1);
    expect(upstream).to.be.at.least(0.06);
    expect(sample(webText, 'completion_client_ttft_seconds_sum', label)).to.be.above(upstream);
  });

  it('counts on the web process the completion requests it holds open, back to 0 once they end', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '20' };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const relaying = async () =>
      sample(
        await (await fetch(`${web.url}/metrics`, { headers: { accept: 'text/plain' } })).text(),
        'completion_requests_relaying',
      );
    const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'hello' }], max_tokens: 200 };
    const streams = [
      openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask),
      openStream(`${web.url}/v1/chat/completions`, account.apiKey, ask),
    ];
    await Promise.all(streams.map((s) => s.waitFor(2)));
    expect(await relaying()).to.equal(2);
    for (const s of streams) s.controller.abort();
    await Promise.all(streams.map((s) => s.finished));
    await eventually(
      async () => ((await relaying()) === 0 ? true : undefined),
      'the web process to let go of both requests',
    );
  });
});
