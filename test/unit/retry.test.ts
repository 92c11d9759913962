import { expect } from 'chai';
import { sleep } from '../../src/clock.js';
import type { RedisClient } from '../../src/infra/redis.js';
import { retry, untilRedisReady } from '../../src/infra/retry.js';

// The one sleep and the ways to wait out an outage built on it.

const outage = () => Object.assign(new Error('Connection is closed.'), { code: 'ECONNREFUSED' });

describe('sleep', () => {
  it('ends as soon as its signal aborts, without rejecting', async () => {
    const controller = new AbortController();
    const slept = sleep(60_000, controller.signal);
    controller.abort();
    await slept;
  });

  it('does not wait at all on a signal already aborted', async () => {
    await sleep(60_000, AbortSignal.abort());
  });
});

describe('retry', () => {
  it('calls again after a retryable failure and resolves with the first success', async () => {
    const heard: unknown[] = [];
    let calls = 0;
    const result = await retry(
      async () => {
        if (++calls < 3) throw outage();
        return 'claimed';
      },
      { retryable: () => true, pauseMs: 1, onRetry: (err) => heard.push(err) },
    );
    expect(result).to.equal('claimed');
    expect(calls).to.equal(3);
    expect(heard).to.have.length(2);
  });

  it('throws a failure that is not retryable at once', async () => {
    let calls = 0;
    const refused = new Error('WRONGTYPE');
    const err = await retry(
      () => {
        calls++;
        return Promise.reject(refused);
      },
      { retryable: () => false, pauseMs: 1 },
    ).catch((e: unknown) => e);
    expect(err).to.equal(refused);
    expect(calls).to.equal(1);
  });

  it('throws a retryable failure once the deadline is past', async () => {
    let calls = 0;
    const err = await retry(
      () => {
        calls++;
        return Promise.reject(outage());
      },
      { retryable: () => true, pauseMs: 1, deadline: performance.now() - 1 },
    ).catch((e: unknown) => e);
    expect(err).to.be.instanceOf(Error);
    expect(calls).to.equal(1);
  });
});

describe('untilRedisReady', () => {
  it('pauses once even on a ready connection, then returns', async () => {
    let polled = 0;
    const redis = {
      get status() {
        polled++;
        return 'ready';
      },
    } as unknown as RedisClient;
    await untilRedisReady(redis, 1);
    expect(polled).to.equal(1);
  });

  it('polls until the connection is ready again', async () => {
    let polled = 0;
    const redis = {
      get status() {
        return ++polled < 4 ? 'reconnecting' : 'ready';
      },
    } as unknown as RedisClient;
    await untilRedisReady(redis, 1);
    expect(polled).to.equal(4);
  });

  it('gives up polling once the deadline is past', async () => {
    let polled = 0;
    const redis = {
      get status() {
        polled++;
        return 'reconnecting';
      },
    } as unknown as RedisClient;
    await untilRedisReady(redis, 1, performance.now() - 1);
    expect(polled).to.equal(1);
  });
});
