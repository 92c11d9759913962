import { expect } from 'chai';
import { createRedis, whenReady, type RedisClient } from '../../src/infra/redis.js';
import { claimRequest } from '../../src/chat/relay/claim.js';
import { RelayBatch } from '../../src/chat/relay/relay-batch.js';
import { RelayPublisher } from '../../src/chat/relay/publisher.js';
import { relayTarget } from '../../src/chat/relay/protocol.js';
import { cancelRequest } from '../../src/chat/relay/request-cancel.js';
import { isolatedPrefix, randomId, testConfig } from '../support/env.js';

describe('claiming a request', () => {
  const config = testConfig({ REDIS_PREFIX: isolatedPrefix() });
  const prefix = config.redis.prefix;
  const request = { accountId: 'acct', stream: true, resumableFor: undefined };
  let redis: RedisClient;

  before(async () => {
    redis = createRedis(config, 'command');
    await whenReady(redis);
  });
  after(() => redis.disconnect());

  it('leaves an ended request its ended lifetime when its job is handed out again (after a Redis restart)', async () => {
    const target = relayTarget(prefix, randomId(), randomId());
    await claimRequest(redis, target, 'worker-a', 360, request);
    const batch = new RelayBatch({ redis, ttls: { runningSeconds: 360, endedSeconds: 120 } });
    await new RelayPublisher(batch, target, { seq: 1, eventId: 0 }).finish('done', '', async () => undefined);
    // BullMQ hands the job out again, to the worker that ran it and to another taking it over.
    const again = await claimRequest(redis, target, 'worker-a', 360, request);
    const forced = await claimRequest(redis, target, 'worker-b', 360, request, true);
    expect(again).to.include({ taken: false, recorded: true });
    expect(forced).to.include({ taken: false, recorded: true });
    expect(await redis.ttl(target.stateKey)).to.be.within(1, 120);
    expect(await redis.ttl(target.logKey)).to.be.within(1, 120);
  });

  it('finds the cancel of a client that left before any worker claimed its request', async () => {
    const target = relayTarget(prefix, randomId(), randomId());
    await cancelRequest(redis, prefix, target.stateKey, target.requestId, 360);
    const claim = await claimRequest(redis, target, 'worker-a', 360, request);
    expect(claim).to.include({ taken: true, previousOwner: '', cancelled: true });
  });

  it('finds the cancel of a client that left while its worker was dead, on the take-over', async () => {
    const target = relayTarget(prefix, randomId(), randomId());
    expect(await claimRequest(redis, target, 'worker-a', 360, request)).to.include({ taken: true, cancelled: false });
    await cancelRequest(redis, prefix, target.stateKey, target.requestId, 360);
    const takeOver = await claimRequest(redis, target, 'worker-b', 360, request, true);
    expect(takeOver).to.include({ taken: true, previousOwner: 'worker-a', cancelled: true });
  });

  it('records no cancel for a request that has ended', async () => {
    const target = relayTarget(prefix, randomId(), randomId());
    await claimRequest(redis, target, 'worker-a', 360, request);
    const batch = new RelayBatch({ redis, ttls: { runningSeconds: 360, endedSeconds: 120 } });
    await new RelayPublisher(batch, target, { seq: 1, eventId: 0 }).finish('done', '', async () => undefined);
    await cancelRequest(redis, prefix, target.stateKey, target.requestId, 360);
    expect(await redis.hget(target.stateKey, 'cancelled')).to.equal(null);
  });
});
