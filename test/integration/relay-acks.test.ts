import { expect } from 'chai';
import { createRedis, whenReady, type RedisClient } from '../../src/infra/redis.js';
import { RelayAcks } from '../../src/chat/relay/acks.js';
import { ACKED_FIELD, requestStateKey } from '../../src/chat/relay/protocol.js';
import { isolatedPrefix, randomId, testConfig } from '../support/env.js';

const nextTurn = () => new Promise((r) => setImmediate(r));

// A web process's acknowledgements against a real Redis: what reaches a client is never more than
// one message past what the workers were told (see chat/relay/acks.ts).
describe('relay acknowledgements', () => {
  const config = testConfig({ REDIS_PREFIX: isolatedPrefix() });
  const prefix = config.redis.prefix;
  const instance = 'ackstest';
  let redis: RedisClient;

  before(async () => {
    redis = createRedis(config, 'command');
    await whenReady(redis);
  });
  after(() => redis.disconnect());

  /** A running request's state (a worker's claim made it) and a gate for it; an interval long enough never to fire here. */
  async function request() {
    const id = randomId();
    const stateKey = requestStateKey(prefix, instance, id);
    await redis.hset(stateKey, 'worker', 'w1');
    const acks = new RelayAcks({ redis, prefix, instance, intervalMs: 60_000 });
    const delivered: number[] = [];
    const gate = acks.open(id);
    const pass = (seq: number, billable = true) => gate.pass(seq, billable, () => delivered.push(seq));
    // A command sent after the acknowledgement is answered after it: the acknowledgement is applied.
    const acked = async () => (await redis.ping(), await redis.hget(stateKey, ACKED_FIELD));
    return { acks, delivered, pass, acked, gate };
  }

  it('hands on a request’s first part of the answer only once it is acknowledged, at the end of the turn', async () => {
    const { delivered, pass, acked } = await request();
    pass(0, false);
    expect(delivered).to.deep.equal([0]);
    pass(1);
    expect(delivered).to.deep.equal([0]);
    await nextTurn();
    expect(delivered).to.deep.equal([0, 1]);
    expect(await acked()).to.equal('1');
  });

  it('hands on one message past the acknowledgement at once, and the rest, in order, with the next acknowledgement', async () => {
    const { acks, delivered, pass, acked } = await request();
    pass(1);
    await nextTurn();
    pass(2);
    expect(delivered).to.deep.equal([1, 2]);
    pass(3);
    pass(4, false);
    expect(delivered).to.deep.equal([1, 2]);
    expect(await acked()).to.equal('1');
    acks.acknowledge();
    expect(delivered).to.deep.equal([1, 2, 3, 4]);
    expect(await acked()).to.equal('4');
  });

  it('drops what waits for a request that ended, and acknowledges nothing for it', async () => {
    const { acks, delivered, pass, acked, gate } = await request();
    pass(1);
    gate.close();
    acks.acknowledge();
    await nextTurn();
    expect(delivered).to.deep.equal([]);
    expect(await acked()).to.equal(null);
  });

  it('does not make again the state of a request that expired', async () => {
    const { acks, pass } = await request();
    const id = randomId();
    const gate = acks.open(id);
    gate.pass(1, true, () => undefined);
    pass(1);
    await nextTurn();
    await redis.ping();
    expect(await redis.exists(requestStateKey(prefix, instance, id))).to.equal(0);
  });
});
