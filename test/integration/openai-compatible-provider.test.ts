import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import type { Env } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { startTracing, type Tracing } from '../../src/infra/tracing.js';
import type { BackgroundService } from '../../src/lifecycle.js';
import { startFakeOpenAI, DEFAULT_TOKENS, type FakeOpenAI } from '../../src/providers/openai/openai.fake.js';
import { OpenAIProvider } from '../../src/providers/openai/openai.provider.js';
import { telemetryNameOf } from '../../src/providers/registry.js';
import { adapterOf, ProviderError } from '../../src/providers/types.js';
import { collectEvents } from '../../src/providers/testing/upstream-fake.js';
import { startCompletionWorker } from '../../workers/completion.js';
import { createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { startOtlpReceiver, type OtlpReceiver } from '../support/otlp-receiver.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The test tree's provider `acme` (test/support/providers/acme/) is one plug-in file and one entry in
// the suite's provider list: nothing in src/ names it. Served here by the OpenAI fake, through the
// registry, a web tier and a completion worker (both in this process), with tracing on.

const MODEL = { id: 'acme-chat', upstream: 'acme-large-1' };

describe('an OpenAI-compatible provider added as one plug-in folder and one list entry', function () {
  this.timeout(30_000);
  let fake: FakeOpenAI;
  let receiver: OtlpReceiver;
  let dir: string;
  let env: Env;
  let tracing: Tracing | undefined;
  let web: TestWeb | undefined;
  let workerApp: AppContext | undefined;
  let worker: BackgroundService | undefined;

  before(async () => {
    [fake, receiver] = await Promise.all([startFakeOpenAI(), startOtlpReceiver()]);
    // The shipped catalog and one model of the test provider.
    dir = await mkdtemp(path.join(os.tmpdir(), 'acme-'));
    const catalog = JSON.parse(await readFile('config/models.json', 'utf8')) as { models: object[] };
    catalog.models.push({
      id: MODEL.id,
      provider: 'acme',
      upstream_model: MODEL.upstream,
      tiers: ['paid'],
      input_price_per_million: '1.00',
      output_price_per_million: '2.00',
    });
    await writeFile(path.join(dir, 'models.json'), JSON.stringify(catalog));
    env = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      MODELS_FILE: path.join(dir, 'models.json'),
      ACME_API_KEY: fake.apiKey,
      ACME_BASE_URL: `${fake.url}/v1`,
      UPSTREAM_MAX_RETRIES: '0',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_BSP_SCHEDULE_DELAY: '20',
    };
  });
  afterEach(() => fake.reset());
  after(async () => {
    await worker?.stop();
    await Promise.all([workerApp?.close(), web?.close()]);
    await tracing?.shutdown();
    await Promise.all([receiver.close(), fake.close(), rm(dir, { recursive: true, force: true })]);
  });

  it("reads the provider's settings from its own variables and serves its models from the shared OpenAI-compatible adapter", async () => {
    const app = createContext(testConfig(env), { role: 'test' });
    try {
      expect(app.config.providers.plugins.map((p) => p.name)).to.include('acme');
      expect((app.config.providers as unknown as Record<string, unknown>).acme).to.deep.equal({
        apiKey: fake.apiKey,
        baseUrl: `${fake.url}/v1`,
      });
      const provider = app.providers.for(app.catalog.find(MODEL.id)!);
      expect(adapterOf(provider)).to.be.instanceOf(OpenAIProvider);
      expect(provider.name).to.equal('acme');
      expect(telemetryNameOf(provider)).to.equal('acme.ai');
    } finally {
      await app.close();
    }
  });

  it('names its upstream failures with its own label', async () => {
    const app = createContext(testConfig(env), { role: 'test' });
    try {
      fake.script({ status: 503, message: 'overloaded' });
      const provider = app.providers.for(app.catalog.find(MODEL.id)!);
      const { error } = await collectEvents(
        provider.stream(
          { model: MODEL.upstream, messages: [{ role: 'user', content: 'hi' }] },
          new AbortController().signal,
        ),
      );
      expect(error).to.be.instanceOf(ProviderError).with.property('message', 'Acme AI answered 503: overloaded');
    } finally {
      await app.close();
    }
  });

  it('answers a completion end to end, at its base URL with its key, and names it acme.ai in the upstream span', async () => {
    tracing = await startTracing(testConfig(env), 'test', { info() {}, warn() {} });
    web = await startTestWeb({ env });
    workerApp = createContext(testConfig(env), { role: 'worker' });
    worker = await startCompletionWorker(workerApp);
    const who = await createTestAccount(web.app, { tier: 'paid' });

    const res = await post(
      `${web.url}/v1/chat/completions`,
      { model: MODEL.id, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 12 },
      { bearer: who.apiKey },
    );
    expect(res.status, res.text).to.equal(200);
    expect(res.body.model).to.equal(MODEL.id);
    expect(res.body.choices[0].message.content).to.equal(DEFAULT_TOKENS.join(''));

    const upstream = fake.requests.at(-1)!;
    expect(upstream.path).to.equal('/v1/chat/completions');
    expect(upstream.headers.authorization).to.equal(`Bearer ${fake.apiKey}`);
    expect(upstream.body.model).to.equal(MODEL.upstream);

    const span = await eventually(
      async () => receiver.spans.find((s) => s.name === `chat ${MODEL.upstream}`),
      'the upstream call span at the receiver',
    );
    expect(span.attributes).to.include({
      'gen_ai.provider.name': 'acme.ai',
      'gen_ai.system': 'acme.ai',
      'gen_ai.request.model': MODEL.upstream,
    });
  });
});
