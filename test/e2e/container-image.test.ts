import { expect } from 'chai';
import OpenAI from 'openai';
import type { ChatCompletionChunk } from 'openai/resources/chat/completions';
import type { Stream } from 'openai/streaming';
import { sql } from 'kysely';
import { migrations } from '../../db/migrations/index.js';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import {
  buildImage,
  havePodman,
  IMAGE,
  podman,
  removeAllContainers,
  runContainer,
  startContainer,
  type Container,
} from '../support/containers.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { migrationDatabase } from '../support/migration-database.js';
import { freePort } from '../support/private-redis.js';
import { openStream } from '../support/sse.js';

// The one image for every role, built from this checkout on a base made from Debian's packages,
// run with podman as an operator runs it: `migrate` on an empty database, then web, worker and
// scheduler containers against the test run's Postgres and Redis, and the API used through the
// containerised web tier with the openai SDK.

const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user' as const, content: 'Tell me a long story' }] };

describe('the container image (podman)', function () {
  // The build runs every layer whose inputs changed: the TypeScript build at least, on each change.
  this.timeout(20 * 60_000);
  let app: AppContext;
  let account: TestAccount;
  let web: { url: string; container: Container };
  let worker: Container;
  let scheduler: { url: string; container: Container };
  let migration: { code: number; output: string };
  let env: Record<string, string>;

  // Mocha runs hooks in the order they are declared: the containers and the context go before
  // the database does, and the database is there before anything uses it.
  after(async () => {
    await removeAllContainers();
    await app?.close();
  });
  // An empty database of its own, for `migrate` to bring to the latest schema.
  const database = migrationDatabase('image');
  before(async () => {
    if (!havePodman()) throw new Error('podman is not installed: apt-get install podman runc mmdebstrap');
    const [webPort, workerPort, schedulerPort] = [await freePort(), await freePort(), await freePort()];
    env = {
      NODE_ENV: 'production',
      HOST: '127.0.0.1',
      PORT: String(webPort),
      WORKER_METRICS_PORT: String(workerPort),
      SCHEDULER_METRICS_PORT: String(schedulerPort),
      DATABASE_URL: database.url(),
      REDIS_URL: process.env.REDIS_URL!,
      REDIS_PREFIX: isolatedPrefix(),
      JWT_SECRET: 'container-test-secret-0123456789abcdef',
      MAIL_TRANSPORT: 'dev-outbox',
      MODEL_BACKEND: 'local',
      // 20 tokens a second: a 60-token answer takes three seconds, time to stop its worker mid-stream.
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '20',
    };
    await buildImage();
    migration = await runContainer('migrate', env);
    const [w, k, s] = await Promise.all([
      startContainer('web', env),
      startContainer('worker', env),
      startContainer('scheduler', env),
    ]);
    web = { url: `http://127.0.0.1:${webPort}`, container: w };
    worker = k;
    scheduler = { url: `http://127.0.0.1:${schedulerPort}`, container: s };
    await eventually(
      async () => (await fetch(`${web.url}/health`).catch(() => undefined))?.ok || undefined,
      'web ready',
      60_000,
    );
    app = createContext(testConfig({ DATABASE_URL: env.DATABASE_URL!, REDIS_PREFIX: env.REDIS_PREFIX! }), {
      role: 'test',
    });
    account = await createTestAccount(app, { tier: 'paid' });
  });

  const sdk = () => new OpenAI({ apiKey: account.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });

  it('migrate brings an empty database to the latest schema and exits 0', async () => {
    expect(migration.code, migration.output).to.equal(0);
    expect(migration.output).to.match(/migrations applied: /);
    const applied = await sql<{ name: string }>`select name from kysely_migration order by name`.execute(app.db);
    expect(applied.rows.map((r) => r.name)).to.deep.equal(Object.keys(migrations).sort());
  });

  it('runs as a non-root user with tini as PID 1, and carries OCI labels', async () => {
    const [info] = JSON.parse((await podman(['image', 'inspect', IMAGE])).stdout) as {
      Config: { User: string; Entrypoint: string[]; Labels: Record<string, string> };
    }[];
    expect(info!.Config.User).to.equal('10001:10001');
    expect(info!.Config.Entrypoint[0]).to.equal('tini');
    expect(info!.Config.Labels).to.include.keys(
      'org.opencontainers.image.title',
      'org.opencontainers.image.version',
      'org.opencontainers.image.revision',
    );
    const top = await podman(['top', web.container.name, 'pid', 'user', 'args']);
    expect(top.stdout).to.match(/\n\s*1\s+\S+\s+tini -- /);
    expect(top.stdout).not.to.match(/\broot\b/);
  });

  it('stays within its documented size target of 400 MB', async () => {
    const [info] = JSON.parse((await podman(['image', 'inspect', IMAGE])).stdout) as { Size: number }[];
    expect(info!.Size / 1e6).to.be.at.most(400);
  });

  it("passes the image's HEALTHCHECK on the web role", async () => {
    await podman(['healthcheck', 'run', web.container.name]);
  });

  it('answers a JSON completion through the containerised web tier (openai SDK)', async () => {
    const answer = await sdk().chat.completions.create({ ...ask, max_tokens: 8 });
    expect(answer.object).to.equal('chat.completion');
    expect(answer.choices[0]!.message.content).to.be.a('string').and.not.empty;
    expect(answer.usage!.completion_tokens).to.equal(8);
  });

  it('streams a completion through the containerised web tier (openai SDK)', async () => {
    const stream = await sdk().chat.completions.create({
      ...ask,
      max_tokens: 10,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      usage = chunk.usage ?? usage;
    }
    expect(text).to.not.equal('');
    expect(usage?.completion_tokens).to.equal(10);
  });

  it('resumes a dropped stream from its last event to the end (openai SDK)', async () => {
    const body = { ...ask, max_tokens: 30, stream_options: { resumable: true } };
    const whole = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, max_tokens: 30 });
    await whole.finished;
    const dropped = openStream(`${web.url}/v1/chat/completions`, account.apiKey, body);
    await dropped.waitFor(5);
    dropped.controller.abort();
    await dropped.finished;
    const id = (JSON.parse(dropped.events[0]!) as { id: string }).id;
    const rest = await sdk().get<Stream<ChatCompletionChunk>>(`/chat/completions/${id}/stream`, {
      stream: true,
      headers: { 'Last-Event-ID': dropped.ids.at(-1)! },
    });
    let text = '';
    for await (const chunk of rest) text += chunk.choices[0]?.delta?.content ?? '';
    const textOf = (events: readonly string[]) =>
      events
        .filter((e) => e !== '[DONE]')
        .map(
          (e) => (JSON.parse(e) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content ?? '',
        )
        .join('');
    expect(textOf(dropped.events) + text).to.equal(textOf(whole.events));
  });

  it('lets a stream in flight finish when its worker container gets SIGTERM, then the worker exits 0', async () => {
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, max_tokens: 60 });
    await s.waitFor(3);
    await worker.kill('SIGTERM');
    await s.finished;
    expect(s.events.at(-1)).to.equal('[DONE]');
    const chunks = s.events.filter((e) => e !== '[DONE]').map((e) => JSON.parse(e) as ChatCompletionChunk);
    expect(chunks.at(-1)!.choices[0]!.finish_reason).to.equal('length');
    expect(await worker.wait()).to.equal(0);
    // The rollout's new worker: metering runs in the workers, so the ledger row is its to write.
    await startContainer('worker', env);
    const row = await eventually(
      () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', chunks[0]!.id).executeTakeFirst(),
      'the usage row',
    );
    expect(row).to.include({ status: 'completed', completion_tokens: 60 });
  });

  it('runs the scheduler, live on its metrics port', async () => {
    const live = await fetch(`${scheduler.url}/health/live`);
    expect(live.status).to.equal(200);
    expect(await live.json()).to.deep.equal({ status: 'ok' });
    const metrics = await (await fetch(`${scheduler.url}/metrics`)).text();
    expect(metrics).to.match(/^scheduler_jobs_enqueued_total/m);
  });
});
