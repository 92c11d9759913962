import { expect } from 'chai';
import { Redis } from 'ioredis';
import { keyShape, measureRequestKeys, steadyStateBytes, type KindFigures } from '../../bench/redis-memory.js';
import { isolatedPrefix, ONE_REDIS_SERVER, randomId, testConfig } from '../support/env.js';

describe(`the benchmark's Redis memory per request ${ONE_REDIS_SERVER}`, () => {
  let redis: Redis;
  let prefix: string;

  beforeEach(() => {
    redis = new Redis(testConfig().redis.url);
    prefix = isolatedPrefix();
  });
  afterEach(() => redis.disconnect());

  it('measures only the keys the batch left, by kind, with their memory and remaining TTL, and names the rest by shape', async () => {
    await redis.set(`${prefix}:req:before`, 'x', 'EX', 120);
    const kinds = [
      { name: 'log', match: new RegExp(`^${prefix}:rlog:`), ttlSeconds: 120 },
      { name: 'state', match: new RegExp(`^${prefix}:req:`), ttlSeconds: 120 },
      { name: 'marker', match: /:settled:/, ttlSeconds: 180 },
    ];
    const figures = await measureRequestKeys(redis, prefix, kinds, async () => {
      for (const id of [randomId(), randomId()]) {
        await redis.multi().xadd(`${prefix}:rlog:${id}`, '1-0', 'k', 'p').expire(`${prefix}:rlog:${id}`, 120).exec();
        await redis.multi().hset(`${prefix}:req:${id}`, { worker: 'w' }).expire(`${prefix}:req:${id}`, 120).exec();
        await redis.set(`${prefix}:limits:{a}:settled:${id}`, '1', 'PX', 180_000);
      }
      await redis.set(`${prefix}:queue:{${prefix}:q}:job:12345`, 'x');
      return 2;
    });
    const [log, state, marker] = figures.kinds;
    expect(figures.requests).to.equal(2);
    expect([log!.keysPerRequest, state!.keysPerRequest, marker!.keysPerRequest]).to.deep.equal([1, 1, 1]);
    for (const k of figures.kinds) expect(k.bytesPerKey).to.be.greaterThan(0);
    expect(log!.observedTtlSeconds).to.be.within(115, 120);
    expect(marker!.observedTtlSeconds).to.be.within(175, 180);
    expect(figures.otherKeys).to.deep.equal({ [`${prefix}:queue:{${prefix}:q}:job:*`]: 1 });
  });

  it('holds every kind of key for its TTL at a sustained rate', () => {
    const kind = (bytesPerRequest: number, ttlSeconds: number): KindFigures => ({
      name: 'k',
      keysPerRequest: 1,
      bytesPerKey: bytesPerRequest,
      bytesPerRequest,
      ttlSeconds,
      observedTtlSeconds: ttlSeconds,
    });
    expect(steadyStateBytes([kind(5000, 120), kind(150, 180)], 100)).to.equal(100 * (5000 * 120 + 150 * 180));
  });

  it('replaces completion ids, hex ids and numbers in a key name', () => {
    expect(keyShape(':rlog:{p:w.0f3a9c2e-1b}:chatcmpl-Ab_3-x9')).to.equal(':rlog:{p:w.*}:chatcmpl-*');
    expect(keyShape(':bull:completions:42')).to.equal(':bull:completions:*');
  });
});
