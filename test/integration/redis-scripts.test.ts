import { expect } from 'chai';
import { Cluster, type Redis } from 'ioredis';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import { createRedis, whenReady, type RedisClient } from '../../src/infra/redis.js';
import { redisScript, runScript, runScriptNow } from '../../src/infra/redis-scripts.js';
import { isolatedPrefix, ONE_REDIS_SERVER, randomId, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { PrivateRedis } from '../support/private-redis.js';

// A script of the test's own: its body is new to the server, so only this test's connections load it.
const uniqueScript = () => redisScript(`test-${randomId()}`, `-- ${randomId()}\nreturn { KEYS[1], ARGV[1] }`);

const mastersOf = (client: RedisClient): Redis[] => (client instanceof Cluster ? client.nodes('master') : [client]);

async function loaded(node: Redis, sha: string): Promise<boolean> {
  const [exists] = (await node.script('EXISTS', sha)) as number[];
  return exists === 1;
}

describe('Redis scripts', () => {
  const clients: RedisClient[] = [];
  const servers: PrivateRedis[] = [];
  afterEach(async () => {
    for (const c of clients.splice(0)) c.disconnect();
    await Promise.all(servers.splice(0).map((s) => s.stop()));
  });

  const connect = async (env: Record<string, string> = {}): Promise<RedisClient> => {
    const client = createRedis(testConfig({ REDIS_PREFIX: isolatedPrefix(), ...env }), 'command');
    clients.push(client);
    await whenReady(client);
    return client;
  };

  it('loads every declared script on every master when a command connection becomes ready', async () => {
    const script = uniqueScript();
    const client = await connect();
    for (const node of mastersOf(client))
      await eventually(async () => ((await loaded(node, script.sha)) ? true : undefined), 'the script loaded');
    expect(await runScript(client, script, ['k'], ['v'])).to.deep.equal(['k', 'v']);
    expect(await runScriptNow(client, script, ['k'], [1])).to.deep.equal(['k', '1']);
  });

  it('runs the scripts of one event-loop turn in one auto-pipeline, one the server lacks included', async () => {
    const client = await connect();
    expect(client.options.enableAutoPipelining).to.equal(true);
    // Declared after the connection was ready: every node answers NOSCRIPT inside the pipeline first.
    const unloaded = uniqueScript();
    const loadedScript = uniqueScript();
    await Promise.all(mastersOf(client).map((node) => node.script('LOAD', loadedScript.lua)));
    const calls = Array.from({ length: 60 }, (_, i) =>
      runScript(client, i % 2 ? unloaded : loadedScript, [`{k${i}}`], [String(i)]),
    );
    expect(await Promise.all(calls)).to.deep.equal(Array.from({ length: 60 }, (_, i) => [`{k${i}}`, String(i)]));
  });

  it('sends a command a library defines on the connection mid-turn on its own, not in the open auto-pipeline', async () => {
    const client = await connect();
    // ECHO opens this turn's auto-pipeline; rate-limiter-flexible then defines its counter script
    // on the connection (as the abuse budget and sign-up limits do when built) and calls it.
    const echo = client.echo('open');
    const limiter = new RateLimiterRedis({
      storeClient: client,
      keyPrefix: `${isolatedPrefix()}:rl`,
      points: 5,
      duration: 60,
    });
    const [opened, consumed] = await Promise.all([echo, limiter.consume('k')]);
    expect(opened).to.equal('open');
    expect(consumed.remainingPoints).to.equal(4);
  });

  it(`loads them again after Redis restarts, which forgets every script ${ONE_REDIS_SERVER}`, async () => {
    const server = await new PrivateRedis().start();
    servers.push(server);
    const script = uniqueScript();
    const client = (await connect({ REDIS_URL: server.url })) as Redis;
    await eventually(async () => ((await loaded(client, script.sha)) ? true : undefined), 'the script loaded');
    const reconnected = new Promise<void>((resolve) => client.once('ready', () => resolve()));
    await server.kill();
    await server.start();
    await reconnected;
    await eventually(async () => ((await loaded(client, script.sha)) ? true : undefined), 'the script loaded again');
  });

  it(`runs a script the server does not hold by sending its body once ${ONE_REDIS_SERVER}`, async () => {
    const server = await new PrivateRedis().start();
    servers.push(server);
    const client = (await connect({ REDIS_URL: server.url })) as Redis;
    // Declared after the connection was ready, and the cache emptied: the server has never seen it.
    const script = uniqueScript();
    await client.script('FLUSH');
    expect(await runScript(client, script, ['k'], ['v'])).to.deep.equal(['k', 'v']);
    expect(await loaded(client, script.sha)).to.equal(true);
    await client.script('FLUSH');
    expect(await runScriptNow(client, script, ['k'], ['w'])).to.deep.equal(['k', 'w']);
  });
});
