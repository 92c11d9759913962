import { expect } from 'chai';
import OpenAI from 'openai';
import type { ChatCompletionChunk } from 'openai/resources/chat/completions';
import type { Stream } from 'openai/streaming';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, ONE_REDIS_SERVER, testConfig } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { openGetStream, openStream, postStream, readSse, type SseResult } from '../support/sse.js';

// Streams that outlive their connection: every event numbered, a stream read again from any web
// process after the last event a client had (Last-Event-ID), a resumable request that runs on
// while its client is away, and a finished completion read back by its id. The built-in local
// model answers a prompt with the same text every time, so a resumed stream can be compared with
// an uninterrupted one word for word.

const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Tell me a long story' }] };

/** The text of choice 0 over a run of `data:` payloads. */
const textOf = (events: readonly string[]): string =>
  events
    .filter((e) => e !== '[DONE]')
    .map((e) => JSON.parse(e) as { choices?: { delta?: { content?: string } }[] })
    .map((c) => c.choices?.[0]?.delta?.content ?? '')
    .join('');

const idOf = (events: readonly string[]): string => (JSON.parse(events[0]!) as { id: string }).id;

const sdk = (web: RoleProcess, apiKey: string) => new OpenAI({ apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });

/** Reads a resumed stream to its end through the official SDK, from after event `after`. */
async function sdkResume(web: RoleProcess, apiKey: string, id: string, after: number): Promise<string> {
  const stream = await sdk(web, apiKey).get<Stream<ChatCompletionChunk>>(`/chat/completions/${id}/stream`, {
    stream: true,
    headers: { 'Last-Event-ID': String(after) },
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  return text;
}

/** A resumed stream read raw, after event `after` (sent as Last-Event-ID, or as ?starting_after). */
async function resume(
  web: RoleProcess,
  apiKey: string,
  id: string,
  after?: number,
  as: 'header' | 'query' = 'header',
): Promise<SseResult> {
  const query = after !== undefined && as === 'query' ? `?starting_after=${after}` : '';
  const headers: Record<string, string> = { authorization: `Bearer ${apiKey}` };
  if (after !== undefined && as === 'header') headers['last-event-id'] = String(after);
  return readSse(await fetch(`${web.url}/v1/chat/completions/${id}/stream${query}`, { headers }));
}

/** A stream the client drops after `n` events: its id, the events it had and the last event id. */
async function dropAfter(web: RoleProcess, apiKey: string, body: object, n: number) {
  const s = openStream(`${web.url}/v1/chat/completions`, apiKey, body);
  await s.waitFor(n);
  s.controller.abort();
  await s.finished;
  return { id: idOf(s.events), events: [...s.events], lastId: Number(s.ids.at(-1)) };
}

const ledgerRow = (app: AppContext, requestId: string) =>
  eventually(
    () => app.db.selectFrom('usage_events').selectAll().where('request_id', '=', requestId).executeTakeFirst(),
    `usage row ${requestId}`,
    20_000,
  );

const ledgerRows = (app: AppContext, accountId: string) =>
  app.db.selectFrom('usage_events').selectAll().where('account_id', '=', accountId).execute();

/** Waits until the completion has ended (its retrieval no longer says it runs). */
const ended = (web: RoleProcess, apiKey: string, id: string) =>
  eventually(
    async () => {
      const r = await get(`${web.url}/v1/chat/completions/${id}`, { bearer: apiKey });
      return r.status === 409 && r.body.error.code === 'completion_in_progress' ? undefined : r;
    },
    `completion ${id} to end`,
    20_000,
  );

describe('resumable streams and completion retrieval (two web processes, one worker)', () => {
  // 20 tokens a second: a 40-token answer takes two seconds, time enough to drop a connection mid-stream.
  const env = {
    REDIS_PREFIX: isolatedPrefix(),
    LOCAL_MODEL_TTFT_MS: '0',
    LOCAL_MODEL_TOKENS_PER_SECOND: '20',
    RELAY_LOG_TTL_SECONDS: '10',
    RESUME_GRACE_SECONDS: '60',
  };
  const body = { ...ask, max_tokens: 40 };
  let app: AppContext;
  let webs: RoleProcess[];
  let worker: RoleProcess;
  let user: TestAccount;
  /** The answer, streamed without interruption. */
  let whole: SseResult;

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    [webs, worker] = await Promise.all([
      Promise.all([startRole('web', env), startRole('web', env)]),
      startRole('worker', env),
    ]);
    const reference = await createTestAccount(app, { tier: 'paid' });
    whole = await postStream(
      `${webs[0]!.url}/v1/chat/completions`,
      { ...body, stream_options: { include_usage: true } },
      reference.apiKey,
    );
  });
  beforeEach(async () => {
    user = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all([...(webs ?? []), worker].map((p) => p?.stop()));
    await app?.close();
  });

  const resumable = { ...body, stream_options: { resumable: true } };

  it('numbers every event of a stream 1, 2, 3, … through [DONE]', () => {
    expect(whole.status).to.equal(200);
    expect(whole.events.at(-1)).to.equal('[DONE]');
    expect(whole.ids).to.deep.equal(whole.events.map((_, i) => String(i + 1)));
  });

  it('openai SDK reads a resumed stream to the end: the text is identical to an uninterrupted run', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, resumable, 5);
    const rest = await sdkResume(webs[0]!, user.apiKey, dropped.id, dropped.lastId);
    expect(textOf(dropped.events) + rest).to.equal(textOf(whole.events));
  });

  it('openai SDK reads a stream resumed on another web process than the one that took it', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, resumable, 5);
    const rest = await sdkResume(webs[1]!, user.apiKey, dropped.id, dropped.lastId);
    expect(textOf(dropped.events) + rest).to.equal(textOf(whole.events));
  });

  it('continues the numbering after the last event, without a gap or a repeat, to [DONE]', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, resumable, 5);
    const r = await resume(webs[1]!, user.apiKey, dropped.id, dropped.lastId, 'query');
    expect(r.status).to.equal(200);
    expect(r.ids).to.deep.equal(r.events.map((_, i) => String(dropped.lastId + 1 + i)));
    expect(r.events.at(-1)).to.equal('[DONE]');
  });

  it('sends the original stream’s headers on a resumed one', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, resumable, 3);
    const r = await resume(webs[1]!, user.apiKey, dropped.id, dropped.lastId);
    expect(r.headers.get('content-type')).to.equal('text/event-stream; charset=utf-8');
    expect(r.headers.get('cache-control')).to.equal('no-cache');
    expect(r.headers.get('x-accel-buffering')).to.equal('no');
  });

  it('replays a stream that ended while its client was away, from the last event it had', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, resumable, 5);
    expect((await ended(webs[0]!, user.apiKey, dropped.id)).status).to.equal(200);
    const r = await resume(webs[1]!, user.apiKey, dropped.id, dropped.lastId);
    expect(textOf(dropped.events) + textOf(r.events)).to.equal(textOf(whole.events));
    expect(r.events.at(-1)).to.equal('[DONE]');
  });

  it('answers a Last-Event-ID at the end with the end again', async () => {
    const first = await postStream(`${webs[0]!.url}/v1/chat/completions`, body, user.apiKey);
    const r = await resume(webs[1]!, user.apiKey, idOf(first.events), Number(first.ids.at(-1)));
    expect(r.events).to.deep.equal(['[DONE]']);
    expect(r.ids).to.deep.equal([first.ids.at(-1)]);
  });

  it('replays the whole stream from its first event without Last-Event-ID', async () => {
    const first = await postStream(`${webs[0]!.url}/v1/chat/completions`, body, user.apiKey);
    const r = await resume(webs[1]!, user.apiKey, idOf(first.events));
    expect(r.events).to.deep.equal(first.events);
    expect(r.ids).to.deep.equal(first.ids);
  });

  it('serves several readers of one stream at once, and records its usage exactly once', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, resumable, 3);
    const readers = await Promise.all([
      resume(webs[0]!, user.apiKey, dropped.id, 0),
      resume(webs[1]!, user.apiKey, dropped.id, dropped.lastId),
      sdkResume(webs[1]!, user.apiKey, dropped.id, dropped.lastId),
    ]);
    expect(textOf(readers[0].events)).to.equal(textOf(whole.events));
    expect(textOf(dropped.events) + textOf(readers[1].events)).to.equal(textOf(whole.events));
    expect(textOf(dropped.events) + readers[2]).to.equal(textOf(whole.events));
    const row = await ledgerRow(app, dropped.id);
    expect(row.status).to.equal('completed');
    expect(await ledgerRows(app, user.account.id)).to.have.length(1);
  });

  it('keeps a resumable request running when its client leaves, and bills the whole answer once', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, resumable, 3);
    const row = await ledgerRow(app, dropped.id);
    const usage = (JSON.parse(whole.events.at(-2)!) as { usage: { completion_tokens: number } }).usage;
    expect(row.status).to.equal('completed');
    expect(row.completion_tokens).to.equal(usage.completion_tokens);
    expect(await ledgerRows(app, user.account.id)).to.have.length(1);
  });

  it('still cancels a stream at once when its client leaves without asking for resumability; a resume ends with the error event', async () => {
    const dropped = await dropAfter(webs[0]!, user.apiKey, body, 3);
    const row = await ledgerRow(app, dropped.id);
    expect(row.status).to.equal('cancelled');
    const r = await resume(webs[1]!, user.apiKey, dropped.id, dropped.lastId);
    const error = JSON.parse(r.events.at(-2)!) as { error: { code: string } };
    expect(error.error.code).to.equal('request_cancelled');
    expect(r.events.at(-1)).to.equal('[DONE]');
    expect(r.ids).to.deep.equal(r.events.map((_, i) => String(dropped.lastId + 1 + i)));
    const retrieved = await get(`${webs[0]!.url}/v1/chat/completions/${dropped.id}`, { bearer: user.apiKey });
    expect(retrieved.status).to.equal(409);
    expect(retrieved.body.error.code).to.equal('completion_incomplete');
    expect(retrieved.headers.get('x-should-retry')).to.equal('false');
  });

  it('answers 404 with the OpenAI error envelope for another account’s completion', async () => {
    const first = await postStream(`${webs[0]!.url}/v1/chat/completions`, body, user.apiKey);
    const other = await createTestAccount(app, { tier: 'paid' });
    const id = idOf(first.events);
    for (const url of [
      `${webs[1]!.url}/v1/chat/completions/${id}/stream`,
      `${webs[1]!.url}/v1/chat/completions/${id}`,
    ]) {
      const r = await get(url, { bearer: other.apiKey });
      expect(r.status).to.equal(404);
      expect(r.body.error).to.include({
        type: 'not_found_error',
        code: 'completion_not_found',
        param: 'completion_id',
      });
    }
    await sdk(webs[1]!, other.apiKey)
      .chat.completions.retrieve(id)
      .then(
        () => expect.fail('404 expected'),
        (e) => expect(e).to.be.instanceOf(OpenAI.NotFoundError),
      );
  });

  it('answers 404 for an id it never made', async () => {
    for (const id of ['chatcmpl-AAAAAAAAAAAAAAAAAAAAAAAA', 'chatcmpl-nope', 'not-an-id']) {
      const r = await get(`${webs[0]!.url}/v1/chat/completions/${id}/stream`, { bearer: user.apiKey });
      expect(r.status).to.equal(404);
      expect(r.body.error.code).to.equal('completion_not_found');
    }
  });

  it('answers 404 once the relay log has expired (RELAY_LOG_TTL_SECONDS after the end)', async () => {
    const first = await postStream(`${webs[0]!.url}/v1/chat/completions`, body, user.apiKey);
    const id = idOf(first.events);
    expect((await get(`${webs[1]!.url}/v1/chat/completions/${id}`, { bearer: user.apiKey })).status).to.equal(200);
    const gone = await eventually(
      async () => {
        const r = await get(`${webs[1]!.url}/v1/chat/completions/${id}`, { bearer: user.apiKey });
        return r.status === 404 ? r : undefined;
      },
      'the completion to expire',
      25_000,
      250,
    );
    expect(gone.body.error.code).to.equal('completion_not_found');
    expect((await get(`${webs[1]!.url}/v1/chat/completions/${id}/stream`, { bearer: user.apiKey })).status).to.equal(
      404,
    );
  });

  it('refuses a Last-Event-ID or starting_after that is not a non-negative integer with 422', async () => {
    const first = await postStream(`${webs[0]!.url}/v1/chat/completions`, body, user.apiKey);
    const url = `${webs[0]!.url}/v1/chat/completions/${idOf(first.events)}/stream`;
    for (const q of ['-1', 'abc', '1.5', '']) {
      const r = await get(`${url}?starting_after=${q}`, { bearer: user.apiKey });
      expect(r.status, q).to.equal(422);
      expect(r.body.detail[0].loc).to.deep.equal(['query', 'starting_after']);
    }
    const r = await get(url, { bearer: user.apiKey, headers: { 'last-event-id': 'seven' } });
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['header', 'last-event-id']);
  });

  it('refuses stream_options.resumable without stream: true with 422', async () => {
    const r = await post(
      `${webs[0]!.url}/v1/chat/completions`,
      { ...body, stream: false, stream_options: { resumable: true } },
      { bearer: user.apiKey },
    );
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body', 'stream_options', 'resumable']);
  });

  it('openai SDK retrieves a finished streamed completion as a chat.completion, its usage with cost as billed', async () => {
    const first = await postStream(
      `${webs[0]!.url}/v1/chat/completions`,
      { ...body, stream_options: { include_usage: true } },
      user.apiKey,
    );
    const id = idOf(first.events);
    const c = await sdk(webs[1]!, user.apiKey).chat.completions.retrieve(id);
    const usageChunk = JSON.parse(first.events.at(-2)!) as {
      usage: object;
      system_fingerprint: string;
      created: number;
    };
    expect(c).to.deep.include({
      id,
      object: 'chat.completion',
      model: body.model,
      created: usageChunk.created,
      system_fingerprint: usageChunk.system_fingerprint,
    });
    expect(c.choices).to.have.length(1);
    expect(c.choices[0]!.message).to.deep.equal({ role: 'assistant', content: textOf(whole.events), refusal: null });
    expect(c.choices[0]!.finish_reason).to.equal('length');
    expect(c.usage).to.deep.equal(usageChunk.usage);
    const row = await ledgerRow(app, id);
    expect(c.usage!.completion_tokens).to.equal(row.completion_tokens);
  });

  it('retrieves a finished non-streaming completion exactly as it was answered', async () => {
    const answered = await post(`${webs[0]!.url}/v1/chat/completions`, body, { bearer: user.apiKey });
    expect(answered.status).to.equal(200);
    const r = await get(`${webs[1]!.url}/v1/chat/completions/${answered.body.id}`, { bearer: user.apiKey });
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.equal(answered.body);
  });

  it('answers 400 for the stream of a completion that was not streamed', async () => {
    const answered = await post(`${webs[0]!.url}/v1/chat/completions`, body, { bearer: user.apiKey });
    const r = await get(`${webs[1]!.url}/v1/chat/completions/${answered.body.id}/stream`, { bearer: user.apiKey });
    expect(r.status).to.equal(400);
    expect(r.body.error.code).to.equal('completion_not_streamed');
  });
});

describe('the grace period of a resumable stream whose client left (RESUME_GRACE_SECONDS)', () => {
  // 5 tokens a second against a grace of 2 s: an answer outlasts the grace by far, so only a
  // reader keeps it going; heartbeats every 100 ms show between tokens.
  const env = {
    REDIS_PREFIX: isolatedPrefix(),
    LOCAL_MODEL_TTFT_MS: '0',
    LOCAL_MODEL_TOKENS_PER_SECOND: '5',
    RESUME_GRACE_SECONDS: '2',
    STREAM_HEARTBEAT_MS: '100',
  };
  const resumable = { ...ask, stream_options: { resumable: true } };
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let user: TestAccount;

  before(async () => {
    app = createContext(testConfig(env), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', env), startRole('worker', env)]);
  });
  beforeEach(async () => {
    user = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  it('cancels the job when no reader comes within the grace period, billing only what was produced', async () => {
    const dropped = await dropAfter(web, user.apiKey, resumable, 2);
    // Running until the grace period ends: retrieval says so.
    const running = await get(`${web.url}/v1/chat/completions/${dropped.id}`, { bearer: user.apiKey });
    expect(running.status).to.equal(409);
    expect(running.body.error.code).to.equal('completion_in_progress');
    const row = await ledgerRow(app, dropped.id);
    expect(row.status).to.equal('cancelled');
    // The whole answer is 104 tokens, 21 s at this pace.
    expect(row.completion_tokens).to.be.greaterThan(0).and.lessThan(60);
    const r = await resume(web, user.apiKey, dropped.id, dropped.lastId);
    expect((JSON.parse(r.events.at(-2)!) as { error: { code: string } }).error.code).to.equal('request_cancelled');
  });

  it('lets a reader that resumes within the grace period take the stream to its end, with heartbeats', async () => {
    const body = { ...resumable, max_tokens: 20 };
    const dropped = await dropAfter(web, user.apiKey, body, 2);
    const r = await resume(web, user.apiKey, dropped.id, dropped.lastId);
    expect(r.events.at(-1)).to.equal('[DONE]');
    expect(r.raw).to.match(/^: keep-alive$/m);
    const row = await ledgerRow(app, dropped.id);
    expect(row.status).to.equal('completed');
    expect(row.completion_tokens).to.equal(20);
  });

  it(`follows a running request for all its readers on one web process with one Redis connection ${ONE_REDIS_SERVER}`, async () => {
    const tailConnections = async () =>
      ((await app.redis.client('LIST')) as string)
        .split('\n')
        .filter((line) => line.includes(` name=${env.REDIS_PREFIX}:relay-log-tail `)).length;
    const dropped = await dropAfter(web, user.apiKey, { ...resumable, max_tokens: 30 }, 2);
    const url = `${web.url}/v1/chat/completions/${dropped.id}/stream`;
    const readers = Array.from({ length: 5 }, () =>
      openGetStream(url, user.apiKey, { 'last-event-id': String(dropped.lastId) }),
    );
    await eventually(
      async () => ((await tailConnections()) === 1 ? true : undefined),
      'one tail connection for the five readers',
    );
    await Promise.all(readers.map((r) => r.finished));
    for (const r of readers) expect(r.events.at(-1)).to.equal('[DONE]');
    await eventually(
      async () => ((await tailConnections()) === 0 ? true : undefined),
      'the tail connection closed after the last reader',
    );
  });

  it('starts the grace period again when the last reader leaves', async () => {
    const body = { ...resumable, max_tokens: 80 };
    const dropped = await dropAfter(web, user.apiKey, body, 2);
    const reader = openGetStream(`${web.url}/v1/chat/completions/${dropped.id}/stream`, user.apiKey, {
      'last-event-id': String(dropped.lastId),
    });
    await reader.waitFor(3);
    reader.controller.abort();
    await reader.finished;
    const row = await ledgerRow(app, dropped.id);
    expect(row.status).to.equal('cancelled');
    expect(row.completion_tokens).to.be.lessThan(80);
  });
});
