import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { loadedPackagesOf, reportingLoadedPackages } from '../support/loaded-packages.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../support/otlp-receiver.js';
import { rolesPerTest, startRole, type RoleProcess } from '../support/processes.js';
import { postStream, type SseResult } from '../support/sse.js';

// Web and worker run as separate processes, as deployed; the receiver stands in for an OpenTelemetry
// collector. A short batch delay makes each process send its spans soon after they end.

const PROMPT = 'Write about the lighthouse keeper whose cat counts the waves';
const ask = {
  model: 'gemini-2.5-flash',
  messages: [{ role: 'user', content: PROMPT }],
  max_tokens: 12,
  stream_options: { include_usage: true },
};

const SPAN_NAMES = [
  'POST /v1/chat/completions',
  'admission',
  'queue wait',
  'relay',
  'completion job',
  'chat gemini-2.5-flash',
  'record usage',
];

/** The access log lines (and any other JSON lines) a process wrote. */
const jsonLines = (output: string): Record<string, unknown>[] =>
  output.split('\n').flatMap((l) => {
    try {
      return l.startsWith('{') ? [JSON.parse(l) as Record<string, unknown>] : [];
    } catch {
      return [];
    }
  });

describe('traces across the web and worker processes (OTLP/HTTP)', function () {
  // Two processes start in before(); on a busy machine that alone can take most of mocha's default.
  this.timeout(60_000);
  let app: AppContext;
  let account: TestAccount;
  let receiver: OtlpReceiver;
  let web: RoleProcess;
  let worker: RoleProcess;
  let stream: SseResult;
  let trace: ReceivedSpan[];

  const span = (name: string): ReceivedSpan => {
    const found = trace.find((s) => s.name === name);
    if (!found) throw new Error(`no span ${name} in ${JSON.stringify(trace.map((s) => s.name))}`);
    return found;
  };

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    account = await createTestAccount(app, { tier: 'paid' });
    receiver = await startOtlpReceiver();
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '200',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_BSP_SCHEDULE_DELAY: '20',
    };
    [web, worker] = await Promise.all([startRole('web', { ...env, LOG_LEVEL: 'debug' }), startRole('worker', env)]);
    stream = await postStream(`${web.url}/v1/chat/completions`, ask, account.apiKey);
    expect(stream.events.at(-1)).to.equal('[DONE]');
    const requestId = stream.headers.get('x-request-id');
    // The request's trace is complete once every span of it has arrived, from both processes.
    trace = await eventually(async () => {
      const server = receiver.spans.find(
        (s) =>
          s.kind === 2 &&
          (s.attributes['http.response.header.x-request-id'] as string[] | undefined)?.[0] === requestId,
      );
      const spans = server ? receiver.spans.filter((s) => s.traceId === server.traceId) : [];
      return SPAN_NAMES.every((n) => spans.some((s) => s.name === n)) ? spans : undefined;
    }, 'every span of the streamed request at the receiver');
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await receiver?.close();
    await app?.close();
  });

  it('makes one trace of a streamed completion, from the web process’s server span to the worker’s upstream call', () => {
    const server = span('POST /v1/chat/completions');
    const job = span('completion job');
    expect(server.parentSpanId).to.equal('');
    for (const name of ['admission', 'queue wait', 'relay', 'completion job'])
      expect(span(name).parentSpanId, name).to.equal(server.spanId);
    for (const name of ['chat gemini-2.5-flash', 'record usage'])
      expect(span(name).parentSpanId, name).to.equal(job.spanId);
    // Two processes: the web's spans and the worker's come from different services and pids.
    for (const name of ['POST /v1/chat/completions', 'admission', 'queue wait', 'relay'])
      expect(span(name).resource['service.name'], name).to.equal('completions-web');
    for (const name of ['completion job', 'chat gemini-2.5-flash', 'record usage'])
      expect(span(name).resource['service.name'], name).to.equal('completions-worker');
    expect(server.resource['process.pid']).to.equal(web.proc.pid);
    expect(job.resource['process.pid']).to.equal(worker.proc.pid);
    expect(server.attributes).to.include({
      'http.route': '/v1/chat/completions',
      'http.response.status_code': 200,
      'app.account.id': account.account.id,
    });
  });

  it('describes the upstream call by the GenAI conventions, with the account and request ids and no prompt or answer text', () => {
    const upstream = span('chat gemini-2.5-flash');
    const completionId = (stream.chunks[0] as { id: string }).id;
    const usage = (stream.chunks.at(-1) as { usage: { prompt_tokens: number; completion_tokens: number } }).usage;
    expect(upstream.kind).to.equal(3); // client
    expect(upstream.attributes).to.include({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'local',
      'gen_ai.system': 'local',
      'gen_ai.request.model': 'gemini-2.5-flash',
      'gen_ai.request.max_tokens': 12,
      'gen_ai.response.model': 'local-model-v1',
      'gen_ai.usage.input_tokens': usage.prompt_tokens,
      'gen_ai.usage.output_tokens': usage.completion_tokens,
      'app.request.id': completionId,
      'app.account.id': account.account.id,
    });
    expect(upstream.attributes['gen_ai.response.finish_reasons']).to.deep.equal(['length']);
    expect(upstream.attributes['gen_ai.response.time_to_first_chunk']).to.be.a('number').at.least(0);
    expect(upstream.events.map((e) => e.name)).to.include('gen_ai.first_chunk');
    const answer = stream.chunks
      .map((c: { choices: { delta: { content?: string } }[] }) => c.choices[0]?.delta.content ?? '')
      .join('');
    expect(answer.length).to.be.above(10);
    for (const body of receiver.bodies) {
      expect(body).not.to.include(PROMPT);
      expect(body).not.to.include(answer);
    }
  });

  it('names the tools a request offered and the ones the model called on its upstream span, never their arguments', async () => {
    const tool = {
      type: 'function',
      function: {
        name: 'get_weather',
        parameters: { type: 'object', properties: { city: { type: 'string', minLength: 12 } }, required: ['city'] },
      },
    };
    const r = await post(
      `${web.url}/v1/chat/completions`,
      { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Weather in Paris?' }], tools: [tool] },
      { bearer: account.apiKey },
    );
    const args: string = r.body.choices[0].message.tool_calls[0].function.arguments;
    const upstream = await eventually(
      async () =>
        receiver.spans.find((s) => s.name === 'chat gemini-2.5-flash' && s.attributes['app.request.id'] === r.body.id),
      'the upstream span of the tool-calling request',
    );
    expect(upstream.attributes['app.request.tools']).to.deep.equal(['get_weather']);
    expect(upstream.attributes['app.response.tool_calls']).to.deep.equal(['get_weather']);
    expect(upstream.attributes['gen_ai.response.finish_reasons']).to.deep.equal(['tool_calls']);
    const city = (JSON.parse(args) as { city: string }).city;
    for (const body of receiver.bodies) expect(body).not.to.include(city);
  });

  it('writes the trace id beside the request id on the web’s access log line', () => {
    const requestId = stream.headers.get('x-request-id');
    const line = jsonLines(web.output()).find((l) => l.msg === 'request' && l.requestId === requestId);
    expect(line, 'the access log line').to.not.equal(undefined);
    expect(line!.traceId).to.equal(span('POST /v1/chat/completions').traceId);
  });
});

describe('tracing switched off', function () {
  // Each test starts and stops a web and a worker process.
  this.timeout(60_000);
  let app: AppContext;
  let account: TestAccount;
  const start = rolesPerTest();
  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  /** Serves one streamed completion through a web and a worker process started with `env`; returns them. */
  const serveOne = async (env: Record<string, string>): Promise<RoleProcess[]> => {
    const common = {
      REDIS_PREFIX: isolatedPrefix(),
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '200',
      NODE_OPTIONS: reportingLoadedPackages(),
      ...env,
    };
    const [web, worker] = await Promise.all([start('web', { ...common, LOG_LEVEL: 'debug' }), start('worker', common)]);
    const stream = await postStream(`${web.url}/v1/chat/completions`, ask, account.apiKey);
    expect(stream.events.at(-1)).to.equal('[DONE]');
    return [web, worker];
  };

  it('loads no OpenTelemetry SDK and logs no trace ids when no OTLP endpoint is set', async () => {
    const processes = await serveOne({ OTEL_SERVICE_NAME: 'completions', OTEL_TRACES_SAMPLER: 'always_on' });
    for (const p of processes) {
      // The API alone (a few no-op objects) may be loaded; nothing of the SDK or the exporter.
      expect(
        (await loadedPackagesOf(p)).filter((name) => name !== '@opentelemetry/api'),
        p.role,
      ).to.deep.equal([]);
      expect(
        jsonLines(p.output()).filter((l) => 'traceId' in l),
        p.role,
      ).to.deep.equal([]);
    }
    expect(
      jsonLines(processes[0]!.output()).some((l) => l.msg === 'request' && typeof l.requestId === 'string'),
    ).to.equal(true);
  });

  it('exports nothing, and loads no SDK, with OTEL_SDK_DISABLED=true even when an endpoint is set', async () => {
    const receiver = await startOtlpReceiver();
    try {
      const processes = await serveOne({
        OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
        OTEL_BSP_SCHEDULE_DELAY: '20',
        OTEL_SDK_DISABLED: 'true',
      });
      // A process that had tracing on would send its last spans while it stops, before it exits.
      for (const p of processes)
        expect(
          (await loadedPackagesOf(p)).filter((name) => name !== '@opentelemetry/api'),
          p.role,
        ).to.deep.equal([]);
      expect(receiver.bodies).to.deep.equal([]);
    } finally {
      await receiver.close();
    }
  });
});
