import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import type { Config } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { createRedis, whenReady, type RedisClient } from '../../src/infra/redis.js';
import type { PreparedJob } from '../../src/chat/relay/completion-job.js';
import {
  silenceLimitMs,
  type CompletionEvent,
  type CompletionStream,
} from '../../src/chat/stream/completion-stream.js';
import { Dispatcher } from '../../src/chat/request/dispatch.service.js';
import {
  completionId,
  encodeRelay,
  kindCode,
  logEntryId,
  readerField,
  readerLeasesKey,
  relayChannel,
  relayLogKey,
  requestStateKey,
  type RelayKind,
} from '../../src/chat/relay/protocol.js';
import { READER_LEASE_MS } from '../../src/chat/relay/readers.js';
import { resumeCompletion, type ResumeDeps } from '../../src/chat/stream/resumed-completion.js';
import type { AppError } from '../../src/errors.js';
import { isolatedPrefix, randomId, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { ManualTimers } from '../support/manual-timers.js';

// A completion stream with its real sources, over real Redis and BullMQ, without HTTP: the live
// one fed by the dispatcher from a worker's relay messages (the worker is played by the test,
// which publishes and logs as a worker does), the resumed one fed from the relay log. Time is
// moved by hand.

describe('completion streams', () => {
  let config: Config;
  let app: AppContext;
  let timers: ManualTimers;
  let dispatcher: Dispatcher;
  const prefix = () => config.redis.prefix;

  before(async () => {
    config = testConfig({ REDIS_PREFIX: isolatedPrefix() });
    app = createContext(config, { role: 'web' });
    await app.warmUp([app.redis]);
    await app.relayHub.start();
  });
  beforeEach(() => {
    timers = new ManualTimers();
    dispatcher = new Dispatcher({
      redis: app.redis,
      queues: app.completionQueues,
      hub: app.relayHub,
      limiter: app.limiter,
      metrics: app.metrics.dispatch,
      config,
      timers,
    });
  });
  afterEach(() => dispatcher.stop());
  after(() => app.close());

  /** What a worker does with a message: appends it to the request's relay log and publishes it. */
  async function workerSends(
    relayTo: string,
    id: string,
    seq: number,
    kind: RelayKind,
    payload = '',
    opts: { log?: boolean; publish?: boolean } = {},
  ): Promise<void> {
    if (opts.log !== false)
      await app.redis.xadd(relayLogKey(prefix(), relayTo, id), logEntryId(seq), 'k', kindCode(kind), 'p', payload);
    if (opts.publish !== false)
      await app.redis.spublish(relayChannel(prefix(), relayTo), encodeRelay(id, seq, kind, payload));
  }

  function jobOf(overrides: Partial<PreparedJob> = {}): PreparedJob {
    return {
      id: completionId(app.relayHub.instance),
      relayTo: app.relayHub.instance,
      accountId: `acct-${randomId()}`,
      tier: 'paid',
      model: {
        id: 'test-model',
        provider: 'openai',
        upstream_model: 'test-model',
        input_price_per_million: '1',
        output_price_per_million: '1',
      },
      params: { model: 'test-model', messages: [{ role: 'user', content: 'hi' }] },
      stream: true,
      includeUsage: false,
      resumable: false,
      created: Math.floor(Date.now() / 1000),
      promptTokens: 1,
      reservedTokens: 10,
      ...overrides,
    };
  }

  /** The stream's next event. */
  async function next(reader: AsyncIterator<CompletionEvent>): Promise<CompletionEvent | undefined> {
    const r = await reader.next();
    return r.done ? undefined : r.value;
  }

  const errorOf = (e: CompletionEvent | undefined): AppError => {
    if (e?.kind !== 'error') throw new Error(`expected an error event, got ${JSON.stringify(e)}`);
    return e.error;
  };

  const stateOf = (job: PreparedJob) => app.redis.hgetall(requestStateKey(prefix(), job.relayTo, job.id));
  const queuedJob = (job: PreparedJob) =>
    Promise.all(app.completionQueues.map((q) => q.getJob(job.id))).then((jobs) => jobs.find(Boolean));

  describe('live, from its worker', () => {
    async function running(job = jobOf()): Promise<{ job: PreparedJob; stream: CompletionStream }> {
      const stream = await dispatcher.dispatch(job);
      expect(stream.state).to.equal('queued');
      await workerSends(job.relayTo, job.id, 0, 'picked');
      return { job, stream };
    }

    it('ends completed when the worker sends the end, after its events in order', async () => {
      const { job, stream } = await running();
      await workerSends(job.relayTo, job.id, 1, 'sse', 'id: 1\ndata: a\n\n');
      await workerSends(job.relayTo, job.id, 2, 'done', 'id: 2\ndata: usage\n\n');
      const events: CompletionEvent[] = [];
      for await (const e of stream) events.push(e);
      expect(events).to.deep.equal([
        { kind: 'picked' },
        { kind: 'events', payload: 'id: 1\ndata: a\n\n' },
        { kind: 'done', payload: 'id: 2\ndata: usage\n\n', lastEventId: 0 },
      ]);
      expect([stream.state, stream.endReason]).to.deep.equal(['ended', 'completed']);
    });

    it('ends completed with the whole answer of a request that does not stream', async () => {
      const { job, stream } = await running(jobOf({ stream: false }));
      await workerSends(job.relayTo, job.id, 1, 'final', '{"object":"chat.completion"}');
      const reader = stream[Symbol.asyncIterator]();
      expect(await next(reader)).to.deep.equal({ kind: 'picked' });
      expect(await next(reader)).to.deep.equal({ kind: 'final', body: '{"object":"chat.completion"}' });
      expect(stream.endReason).to.equal('completed');
    });

    it("ends failed with the worker's error, as the client is to see it", async () => {
      const { job, stream } = await running();
      const failure = {
        status: 429,
        error: { message: 'slow down', type: 'rate_limit_error', code: 'upstream_rate_limited', param: null },
        headers: { 'Retry-After': '7' },
      };
      await workerSends(job.relayTo, job.id, 1, 'error', JSON.stringify(failure));
      const reader = stream[Symbol.asyncIterator]();
      await next(reader);
      const error = errorOf(await next(reader));
      expect([error.status, error.code, error.headers]).to.deep.equal([
        429,
        'upstream_rate_limited',
        { 'Retry-After': '7' },
      ]);
      expect(stream.endReason).to.equal('failed');
    });

    it('ended by its client while queued, withdraws the job', async () => {
      const job = jobOf();
      const stream = await dispatcher.dispatch(job);
      expect(await queuedJob(job)).to.not.equal(undefined);
      stream.end('client_left');
      await eventually(async () => ((await queuedJob(job)) === undefined ? true : undefined), 'the job withdrawn');
      expect(stream.endReason).to.equal('client_left');
    });

    it('ended by its client while running, cancels the request', async () => {
      const { job, stream } = await running();
      const reader = stream[Symbol.asyncIterator]();
      expect(await next(reader)).to.deep.equal({ kind: 'picked' });
      stream.end('client_left');
      expect(await next(reader)).to.equal(undefined);
      await eventually(async () => ((await stateOf(job)).cancelled === '1' ? true : undefined), 'the cancel recorded');
    });

    it('ended by the client of a resumable request while running, leaves it running and counts the reader out', async () => {
      const { job, stream } = await running(jobOf({ resumable: true }));
      const reader = stream[Symbol.asyncIterator]();
      await next(reader);
      stream.end('client_left');
      const field = readerField(app.relayHub.instance);
      await eventually(async () => ((await stateOf(job))[field] === '-1' ? true : undefined), 'the reader counted out');
      expect((await stateOf(job)).cancelled).to.equal(undefined);
    });

    it('ends idle when its worker sends nothing for the silence limit, and cancels the request', async () => {
      const { job, stream } = await running();
      const reader = stream[Symbol.asyncIterator]();
      await next(reader);
      timers.advance(silenceLimitMs(config) - 1);
      expect(stream.state).to.equal('running');
      timers.advance(1);
      expect(errorOf(await next(reader)).code).to.equal('worker_timeout');
      expect(stream.endReason).to.equal('silence');
      await eventually(async () => ((await stateOf(job)).cancelled === '1' ? true : undefined), 'the cancel recorded');
    });

    it('ends with a relay gap when a message was lost and the log does not have it either', async () => {
      const { job, stream } = await running();
      const reader = stream[Symbol.asyncIterator]();
      await next(reader);
      // Message 1 never arrives anywhere; 2 does, and the log is read for 1.
      await workerSends(job.relayTo, job.id, 2, 'sse', 'id: 2\ndata: b\n\n', { log: false });
      expect(errorOf(await next(reader)).code).to.equal('relay_interrupted');
      expect(stream.endReason).to.equal('relay_gap');
    });

    it('fills a lost message from the log and goes on', async () => {
      const { job, stream } = await running();
      const reader = stream[Symbol.asyncIterator]();
      await next(reader);
      await workerSends(job.relayTo, job.id, 1, 'sse', 'id: 1\ndata: a\n\n', { publish: false });
      await workerSends(job.relayTo, job.id, 2, 'done', '');
      expect(await next(reader)).to.deep.equal({ kind: 'events', payload: 'id: 1\ndata: a\n\n' });
      expect(await next(reader)).to.deep.equal({ kind: 'done', payload: '', lastEventId: 0 });
    });

    it('ends with 503 no_worker_available when no worker takes the job in time, and withdraws it', async () => {
      const job = jobOf();
      const stream = await dispatcher.dispatch(job);
      timers.advance(config.queue.pickupTimeoutMs);
      const error = errorOf(await next(stream[Symbol.asyncIterator]()));
      expect([error.status, error.code]).to.deep.equal([503, 'no_worker_available']);
      expect(stream.endReason).to.equal('no_worker');
      expect(await queuedJob(job)).to.equal(undefined);
    });
  });

  describe('resumed, from its relay log', () => {
    const accountId = 'acct-resume';

    /** A resumable streamed request of `accountId` with `events` logged (seq 1…), as its worker left it. */
    async function logged(
      events: string[],
      opts: { resumable?: boolean } = {},
    ): Promise<{ id: string; origin: string }> {
      const origin = app.relayHub.instance;
      const id = completionId(origin);
      await app.redis.hset(requestStateKey(prefix(), origin, id), {
        account: accountId,
        stream: '1',
        resumable: opts.resumable === false ? '0' : '1',
      });
      await workerSends(origin, id, 0, 'picked', '', { publish: false });
      for (const [i, e] of events.entries()) await workerSends(origin, id, i + 1, 'sse', e, { publish: false });
      return { id, origin };
    }
    let clock: ManualClock;
    beforeEach(() => {
      clock = new ManualClock();
    });
    // What resuming works with, from the process context, and the test's clock and timers.
    const resumeDeps = (redis = app.redis, maxReaders?: number): ResumeDeps => ({
      redis,
      relayLogTails: app.relayLogTails,
      relayHub: app.relayHub,
      config:
        maxReaders === undefined
          ? config
          : {
              ...config,
              limits: {
                ...config.limits,
                completionReads: { ...config.limits.completionReads, maxReadersPerCompletion: maxReaders },
              },
            },
      clock,
      outages: app.outages,
      log: app.log,
      timers,
    });
    const readersOf = async (origin: string, id: string) =>
      (await app.redis.hget(requestStateKey(prefix(), origin, id), readerField(app.relayHub.instance))) ?? '0';

    it('replays the log after the reader’s last event, then ends completed at the end the worker logged', async () => {
      const { id, origin } = await logged(['id: 1\ndata: a\n\n', 'id: 2\ndata: b\n\n']);
      await workerSends(origin, id, 3, 'done', 'id: 3\ndata: usage\n\n', { publish: false });
      const stream = await resumeCompletion(resumeDeps(), accountId, id, 1);
      expect(await readersOf(origin, id)).to.equal('1');
      const events: CompletionEvent[] = [];
      for await (const e of stream) events.push(e);
      expect(events).to.deep.equal([
        { kind: 'events', payload: 'id: 2\ndata: b\n\n' },
        { kind: 'done', payload: 'id: 3\ndata: usage\n\n', lastEventId: 3 },
      ]);
      expect(stream.endReason).to.equal('completed');
      // A reader that saw the end is not counted out: the request is over.
      expect(await readersOf(origin, id)).to.equal('1');
    });

    it('ended by its client, counts its reader out', async () => {
      const { id, origin } = await logged(['id: 1\ndata: a\n\n']);
      const stream = await resumeCompletion(resumeDeps(), accountId, id, 0);
      const reader = stream[Symbol.asyncIterator]();
      expect(await next(reader)).to.deep.equal({ kind: 'events', payload: 'id: 1\ndata: a\n\n' });
      stream.end('client_left');
      expect(await next(reader)).to.equal(undefined);
      await eventually(
        async () => ((await readersOf(origin, id)) === '0' ? true : undefined),
        'the reader counted out',
      );
    });

    it('ends idle when the worker writes nothing for the silence limit', async () => {
      const { id } = await logged(['id: 1\ndata: a\n\n']);
      const stream = await resumeCompletion(resumeDeps(), accountId, id, 0);
      const reader = stream[Symbol.asyncIterator]();
      await next(reader);
      expect(await next(reader)).to.deep.equal({ kind: 'caught_up' });
      const idle = next(reader);
      // The tail is joined and the log read once more before the wait starts.
      // The reader's lease renewal is one timer; the tail's wait is the other.
      await eventually(async () => (timers.pending > 1 ? true : undefined), 'the tail waiting');
      timers.advance(silenceLimitMs(config));
      const e = await idle;
      expect(errorOf(e).code).to.equal('worker_timeout');
      expect(e).to.include({ lastEventId: 1 });
      expect(stream.endReason).to.equal('silence');
    });

    it('ends with 503 when Redis goes away before anything was sent', async () => {
      const { id } = await logged(['id: 1\ndata: a\n\n']);
      const redis = await ownRedis();
      const stream = await resumeCompletion(resumeDeps(redis), accountId, id, 0);
      redis.disconnect();
      const error = errorOf(await next(stream[Symbol.asyncIterator]()));
      expect([error.status, error.code, error.headers['Retry-After']]).to.deep.equal([503, 'service_unavailable', '5']);
      expect(stream.endReason).to.equal('redis_down');
    });

    it('ends with relay_interrupted when Redis goes away after events were sent', async () => {
      const { id } = await logged(['id: 1\ndata: a\n\n']);
      const redis = await ownRedis();
      const stream = await resumeCompletion(resumeDeps(redis), accountId, id, 0);
      const reader = stream[Symbol.asyncIterator]();
      expect(await next(reader)).to.deep.equal({ kind: 'events', payload: 'id: 1\ndata: a\n\n' });
      redis.disconnect();
      let e = await next(reader);
      if (e?.kind === 'caught_up') e = await next(reader);
      expect(errorOf(e).code).to.equal('relay_interrupted');
      expect(stream.endReason).to.equal('redis_down');
    });

    it('refuses a completion of another account as not found', async () => {
      const { id } = await logged([]);
      let thrown: AppError | undefined;
      await resumeCompletion(resumeDeps(), 'someone-else', id, 0).catch((err: AppError) => (thrown = err));
      expect([thrown?.status, thrown?.code]).to.deep.equal([404, 'completion_not_found']);
    });

    /** Resumes with one reader slot per completion; the error it was refused with, if it was. */
    const resumeOneSlot = (id: string) =>
      resumeCompletion(resumeDeps(app.redis, 1), accountId, id, 0).then(
        (stream) => ({ stream, refused: undefined }),
        (err: AppError) => ({ stream: undefined, refused: err }),
      );

    it('refuses a reader past RESUME_MAX_READERS with 429 too_many_readers, and admits one once a reader leaves', async () => {
      const { id } = await logged(['id: 1\ndata: a\n\n']);
      const first = await resumeOneSlot(id);
      expect(first.refused).to.equal(undefined);
      const second = await resumeOneSlot(id);
      expect([second.refused?.status, second.refused?.code, second.refused?.headers['Retry-After']]).to.deep.equal([
        429,
        'too_many_readers',
        '2',
      ]);
      expect(second.refused?.message).to.match(/already has 1 resumed streams following it/);
      first.stream!.end('client_left');
      const third = await eventually(
        async () => (await resumeOneSlot(id)).stream,
        'a slot freed by the reader leaving',
      );
      third.end('client_left');
    });

    it('keeps a reader’s slot past READER_LEASE_MS while its web process renews the lease', async () => {
      const { id, origin } = await logged(['id: 1\ndata: a\n\n']);
      const first = await resumeOneSlot(id);
      const leases = readerLeasesKey(prefix(), origin, id);
      const [member, taken] = await app.redis.zrange(leases, 0, -1, 'WITHSCORES');
      clock.advance(READER_LEASE_MS / 3);
      timers.advance(READER_LEASE_MS / 3);
      await eventually(
        async () => (Number(await app.redis.zscore(leases, member!)) > Number(taken) ? true : undefined),
        'the lease renewed',
      );
      // Past the lease it was first given, within the renewed one.
      clock.advance(READER_LEASE_MS - 1);
      expect((await resumeOneSlot(id)).refused?.code).to.equal('too_many_readers');
      first.stream!.end('client_left');
    });

    it('frees the slot of a reader whose web process died once its lease lapses', async () => {
      const { id } = await logged(['id: 1\ndata: a\n\n']);
      // Taken and never renewed nor released, as by a process killed while it served the reader.
      const orphan = await resumeOneSlot(id);
      expect(orphan.refused).to.equal(undefined);
      clock.advance(READER_LEASE_MS - 1);
      expect((await resumeOneSlot(id)).refused?.code).to.equal('too_many_readers');
      clock.advance(1);
      const next = await resumeOneSlot(id);
      expect(next.refused).to.equal(undefined);
      next.stream!.end('client_left');
    });

    const own: RedisClient[] = [];
    async function ownRedis(): Promise<RedisClient> {
      const redis = createRedis(config, 'command');
      own.push(redis);
      await whenReady(redis);
      return redis;
    }
    after(() => own.forEach((r) => r.disconnect()));
  });
});
