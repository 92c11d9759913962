import { expect } from 'chai';
import { createRedis, shardSubscribers, whenReady, type RedisClient } from '../../src/infra/redis.js';
import { RelayBatch } from '../../src/chat/relay/relay-batch.js';
import { RelayPublisher } from '../../src/chat/relay/publisher.js';
import { decodeRelay, relayTarget } from '../../src/chat/relay/protocol.js';
import { readRelayLog } from '../../src/chat/relay/log.js';
import { isolatedPrefix, randomId, testConfig } from '../support/env.js';

const nextTurn = () => new Promise((r) => setImmediate(r));

describe('relay publisher', () => {
  const config = testConfig({ REDIS_PREFIX: isolatedPrefix() });
  let redis: RedisClient;
  let sub: RedisClient;

  before(async () => {
    redis = createRedis(config, 'command');
    sub = createRedis(config, 'subscriber');
    await Promise.all([whenReady(redis), whenReady(sub)]);
  });
  after(() => {
    redis.disconnect();
    sub.disconnect();
  });

  it('publishes and logs each message once while earlier calls are still in flight', async () => {
    const target = relayTarget(config.redis.prefix, randomId(), randomId());
    const received: number[] = [];
    sub.on('smessage', (channel: string, raw: string) => {
      if (channel === target.channel) received.push(decodeRelay(raw).message!.seq);
    });
    await sub.ssubscribe(target.channel);
    const batch = new RelayBatch({ redis, ttls: { runningSeconds: 60, endedSeconds: 60 } });
    const publisher = new RelayPublisher(batch, target, { seq: 1, eventId: 0 });
    // One event per event-loop turn: a Redis round trip spans several turns, so several batches
    // are in flight at once.
    for (let i = 0; i < 200; i++) {
      publisher.sse(`data: {"n":${i}}\n\n`);
      await nextTurn();
    }
    await publisher.finish('done', '', async () => undefined);
    const log = await readRelayLog(redis, target.logKey);
    const sentSeqs = log.map((e) => e.seq);
    expect(sentSeqs).to.deep.equal([...sentSeqs].sort((a, b) => a - b));
    // Each event numbered as it was queued (its SSE `id:`), whatever message it travelled in.
    expect(log.map((e) => e.payload).join('')).to.equal(
      Array.from({ length: 200 }, (_, i) => `id: ${i + 1}\ndata: {"n":${i}}\n\n`).join(''),
    );
    // Every published message arrives before the end message that follows it; wait for the end.
    const last = sentSeqs.at(-1)!;
    for (let i = 0; i < 200 && !received.includes(last); i++) await new Promise((r) => setTimeout(r, 5));
    expect(received).to.deep.equal(sentSeqs.filter((seq) => log.find((e) => e.seq === seq)!.kind !== 'usage'));
    expect(sentSeqs.length).to.be.greaterThan(20);
  });

  it('knows the last message a subscriber took, and what each choice held up to it', async () => {
    const target = relayTarget(config.redis.prefix, randomId(), randomId());
    const batch = new RelayBatch({ redis, ttls: { runningSeconds: 60, endedSeconds: 60 } });
    const publisher = new RelayPublisher(batch, target, { seq: 1, eventId: 0 });
    const chunk = (text: string) => `data: {"choices":[{"index":0,"delta":{"content":"${text}"}}]}\n\n`;
    // Nobody subscribes yet: published, logged, taken by no one.
    publisher.sse(chunk('early'));
    await nextTurn();
    await publisher.settled(5000);
    expect(publisher.received).to.equal(0);
    expect((await publisher.choicesThrough(publisher.received, 1))[0]!.text).to.equal('');

    const listener = createRedis(config, 'subscriber');
    try {
      await whenReady(listener);
      await listener.ssubscribe(target.channel);
      publisher.sse(chunk(' one'));
      await nextTurn();
      publisher.sse(chunk(' two'));
      await nextTurn();
      await publisher.settled(5000);
      expect(publisher.received).to.equal(3);
      // Up to the last message taken the client had everything: a web process fills a gap from the log.
      expect((await publisher.choicesThrough(publisher.received, 1))[0]!.text).to.equal('early one two');
    } finally {
      listener.disconnect();
    }
    // The subscriber is gone: later messages do not move the mark.
    for (let i = 0; i < 100 && (await shardSubscribers(redis, target.channel)) > 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    publisher.sse(chunk(' three'));
    await nextTurn();
    await publisher.settled(5000);
    expect(publisher.received).to.equal(3);
  });

  it("sends a stream's first token at once and lets later ones within the coalescing time share a message", async () => {
    const target = relayTarget(config.redis.prefix, randomId(), randomId());
    // A long window, so the test does not depend on how fast the machine is.
    const batch = new RelayBatch({ redis, ttls: { runningSeconds: 60, endedSeconds: 60 }, coalesceMs: 60_000 });
    const publisher = new RelayPublisher(batch, target, { seq: 1, eventId: 0 });
    publisher.sse('data: first\n\n', true);
    for (let i = 0; i < 20 && (await readRelayLog(redis, target.logKey)).length === 0; i++)
      await new Promise((r) => setTimeout(r, 5));
    expect((await readRelayLog(redis, target.logKey)).map((e) => e.payload)).to.deep.equal(['id: 1\ndata: first\n\n']);
    for (const token of ['a', 'b', 'c']) {
      publisher.sse(`data: ${token}\n\n`, false);
      await nextTurn();
    }
    expect(await readRelayLog(redis, target.logKey)).to.have.length(1);
    // The end takes whatever waits with it, in order, without waiting for the timer.
    await publisher.finish('done', '', async () => undefined);
    const log = await readRelayLog(redis, target.logKey);
    expect(log.map((e) => [e.kind, e.payload])).to.deep.equal([
      ['sse', 'id: 1\ndata: first\n\n'],
      ['sse', 'id: 2\ndata: a\n\nid: 3\ndata: b\n\nid: 4\ndata: c\n\n'],
      ['done', ''],
    ]);
  });
});
