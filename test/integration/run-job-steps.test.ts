import { expect } from 'chai';
import { createRedis, whenReady, type RedisClient } from '../../src/infra/redis.js';
import { claimJob, takeOverGraceMs, takeOverSilenceMs, type ClaimDeps } from '../../src/chat/job/claim-job.js';
import type { RunningJob } from '../../src/chat/job/run-job.js';
import { Heartbeat, readWorkerSeen, workerAliveKey, workerSeenKey } from '../../src/chat/relay/liveness.js';
import { claimRequest } from '../../src/chat/relay/claim.js';
import { RelayBatch } from '../../src/chat/relay/relay-batch.js';
import { RelayPublisher } from '../../src/chat/relay/publisher.js';
import { relayTarget } from '../../src/chat/relay/protocol.js';
import { cancelRequest } from '../../src/chat/relay/request-cancel.js';
import type { CompletionJob } from '../../src/chat/relay/completion-job.js';
import { isolatedPrefix, randomId, testConfig } from '../support/env.js';

// The worker's first step, against a real Redis: claim the request, decline it while the worker
// holding it lives, take it over once that worker is dead, and carry a recorded cancel along.
describe('a completion job’s claim step', () => {
  const config = testConfig({ REDIS_PREFIX: isolatedPrefix(), LIVENESS_TTL_MS: '300' });
  const prefix = config.redis.prefix;
  let redis: RedisClient;
  const alive = new Set<string>();

  const runtime = (workerId: string): ClaimDeps => ({
    redis,
    config,
    outages: { redis: { failure: () => undefined } },
    workerId,
    // No last-seen times here: the take-over counts the grace from the claim (see the tests below for the other way).
    workerSeen: async (id: string) => ({ alive: alive.has(id) }),
  });
  const newJob = (): CompletionJob =>
    ({ id: randomId(), relayTo: randomId(), accountId: 'acct', stream: true, resumable: false }) as CompletionJob;
  const newRunning = (job: CompletionJob): RunningJob => ({
    controller: new AbortController(),
    relayTo: job.relayTo,
    resumable: false,
  });
  const targetOf = (job: CompletionJob) => relayTarget(prefix, job.relayTo, job.id);
  const request = { accountId: 'acct', stream: true, resumableFor: undefined };

  before(async () => {
    redis = createRedis(config, 'command');
    await whenReady(redis);
  });
  after(() => redis.disconnect());
  beforeEach(() => alive.clear());

  it('takes a request nobody holds', async () => {
    const job = newJob();
    const claim = await claimJob(runtime('w1'), job, targetOf(job), newRunning(job));
    expect(claim).to.include({ taken: true, previousOwner: '', cancelled: false });
  });

  it('declines a request held by a worker that is alive', async () => {
    const job = newJob();
    await claimRequest(redis, targetOf(job), 'w1', 360, request);
    alive.add('w1');
    expect(await claimJob(runtime('w2'), job, targetOf(job), newRunning(job))).to.equal('declined');
  });

  it('declines a request whose worker shows it is alive again within the grace (cut off from Redis for a moment)', async () => {
    const job = newJob();
    await claimRequest(redis, targetOf(job), 'w1', 360, request);
    let asked = 0;
    const rt = { ...runtime('w2'), workerSeen: async () => ({ alive: ++asked >= 3 }) } as ClaimDeps;
    expect(await claimJob(rt, job, targetOf(job), newRunning(job))).to.equal('declined');
    expect(asked).to.equal(3);
    expect(await redis.hget(targetOf(job).stateKey, 'worker')).to.equal('w1');
  });

  it('takes over, when its last-seen time is not known, only once the worker has stayed dead for the whole grace from the claim, two liveness TTLs', async () => {
    const job = newJob();
    await claimRequest(redis, targetOf(job), 'w1', 360, request);
    const started = performance.now();
    const claim = await claimJob(runtime('w2'), job, targetOf(job), newRunning(job));
    expect(claim).to.include({ taken: true, previousOwner: 'w1' });
    expect(performance.now() - started).to.be.at.least(takeOverGraceMs(config));
    expect(takeOverGraceMs(config)).to.equal(600);
  });

  describe('with the worker’s last-seen time, by Redis’s clock', () => {
    const seenRuntime = (workerId: string, reads: { n: number }): ClaimDeps => ({
      ...runtime(workerId),
      workerSeen: async (id: string) => {
        reads.n++;
        return readWorkerSeen(redis, prefix, id);
      },
    });
    /** Notes `id` as last seen `agoMs` ago by Redis's clock, its liveness key gone. */
    const lastSeen = async (id: string, agoMs: number) => {
      const [seconds, micros] = await redis.time();
      const now = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
      await redis.set(workerSeenKey(prefix, id), String(now - agoMs), 'PX', 60_000);
    };

    it('notes each heartbeat’s time, which outlives the liveness key', async () => {
      const beat = new Heartbeat(redis, workerAliveKey(prefix, 'hb'), 300, () => '1', workerSeenKey(prefix, 'hb'));
      await beat.start();
      expect(await readWorkerSeen(redis, prefix, 'hb')).to.deep.equal({ alive: true });
      await beat.stop();
      const seen = await readWorkerSeen(redis, prefix, 'hb');
      expect(seen.alive).to.equal(false);
      expect(seen.silentMs).to.be.a('number').and.at.least(0).and.below(takeOverSilenceMs(config));
    });

    it('takes over at once a request whose worker has been silent for four TTLs already (the lock and the stalled check counted in)', async () => {
      const job = newJob();
      await claimRequest(redis, targetOf(job), 'w1', 360, request);
      await lastSeen('w1', takeOverSilenceMs(config) + 100);
      const reads = { n: 0 };
      const claim = await claimJob(seenRuntime('w2', reads), job, targetOf(job), newRunning(job));
      expect(claim).to.include({ taken: true, previousOwner: 'w1' });
      expect(reads.n).to.equal(1);
    });

    it('waits until a worker seen just now has been silent for four TTLs, longer than the grace from the claim', async () => {
      const job = newJob();
      await claimRequest(redis, targetOf(job), 'w1', 360, request);
      const started = performance.now();
      await lastSeen('w1', 0);
      const claim = await claimJob(seenRuntime('w2', { n: 0 }), job, targetOf(job), newRunning(job));
      expect(claim).to.include({ taken: true, previousOwner: 'w1' });
      expect(performance.now() - started).to.be.at.least(takeOverSilenceMs(config) - 20);
      expect(takeOverSilenceMs(config)).to.be.above(takeOverGraceMs(config));
    });

    it('declines a request whose worker writes its key again before it has been silent that long', async () => {
      const job = newJob();
      await claimRequest(redis, targetOf(job), 'w1', 360, request);
      await lastSeen('w1', takeOverSilenceMs(config) / 2);
      const reads = { n: 0 };
      const rt = {
        ...seenRuntime('w2', reads),
        workerSeen: async (id: string) => {
          // The worker reconnects after the take-over's second look.
          if (++reads.n === 2) await redis.set(workerAliveKey(prefix, id), '1', 'PX', 300);
          return readWorkerSeen(redis, prefix, id);
        },
      };
      expect(await claimJob(rt, job, targetOf(job), newRunning(job))).to.equal('declined');
      expect(await redis.hget(targetOf(job).stateKey, 'worker')).to.equal('w1');
    });
  });

  it('takes over a request whose worker is dead, naming that worker', async () => {
    const job = newJob();
    await claimRequest(redis, targetOf(job), 'w1', 360, request);
    const claim = await claimJob(runtime('w2'), job, targetOf(job), newRunning(job));
    expect(claim).to.include({ taken: true, previousOwner: 'w1' });
    expect(await redis.hget(targetOf(job).stateKey, 'worker')).to.equal('w2');
  });

  it('takes over with the cancel its client recorded while the dead worker held it', async () => {
    const job = newJob();
    await claimRequest(redis, targetOf(job), 'w1', 360, request);
    await cancelRequest(redis, prefix, targetOf(job).stateKey, job.id, 360);
    const claim = await claimJob(runtime('w2'), job, targetOf(job), newRunning(job));
    expect(claim).to.include({ taken: true, previousOwner: 'w1', cancelled: true });
  });

  it('declines a request whose usage is recorded', async () => {
    const job = newJob();
    await claimRequest(redis, targetOf(job), 'w1', 360, request);
    const batch = new RelayBatch({ redis, ttls: { runningSeconds: 360, endedSeconds: 120 } });
    await new RelayPublisher(batch, targetOf(job), { seq: 1, eventId: 0 }).finish('done', '', async () => undefined);
    expect(await claimJob(runtime('w2'), job, targetOf(job), newRunning(job))).to.equal('declined');
  });
});
