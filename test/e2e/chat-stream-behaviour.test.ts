import { expect } from 'chai';
import { Redis } from 'ioredis';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { rolesPerTest } from '../support/processes.js';
import { openStream, postStream } from '../support/sse.js';
import { eventually } from '../support/http.js';
import net from 'node:net';

describe('streams: heartbeats, lost relay messages and shutdown', () => {
  let app: AppContext;
  let account: TestAccount;
  const start = rolesPerTest();

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 20 };

  it('keeps a stream alive with comment heartbeats while the first token is slow', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '1500', STREAM_HEARTBEAT_MS: '200' };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const s = await postStream(`${web.url}/v1/chat/completions`, ask, account.apiKey);
    expect(s.status).to.equal(200);
    const firstData = s.raw.indexOf('data: ');
    const heartbeats = s.raw.slice(0, firstData).match(/^: keep-alive$/gm) ?? [];
    expect(heartbeats.length).to.be.greaterThan(1);
    expect(s.events.at(-1)).to.equal('[DONE]');
  });

  it('ends the stream with an error event and [DONE] when a relay message is lost', async () => {
    const prefix = isolatedPrefix();
    const env = { REDIS_PREFIX: prefix, LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '20' };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    // Watch the relay like the web process does (its one channel); when the stream's third
    // message shows, jump its sequence ahead as if a message between had been lost.
    const watcher = new Redis(process.env.REDIS_URL!);
    const injector = new Redis(process.env.REDIS_URL!);
    let injected = false;
    watcher.on('smessage', (channel: string, message: string) => {
      const [requestId, seq] = message.split('|');
      if (injected || seq !== '2') return;
      injected = true;
      void injector.spublish(channel, `${requestId}|99|s|data: {"lost":"in between"}\n\n`);
    });
    const [channel] = (await injector.call('PUBSUB', 'SHARDCHANNELS', `${prefix}:relay:*`)) as string[];
    await watcher.ssubscribe(channel!);
    try {
      const s = await postStream(`${web.url}/v1/chat/completions`, { ...ask, max_tokens: 200 }, account.apiKey);
      expect(injected).to.equal(true);
      expect(s.events.at(-1)).to.equal('[DONE]');
      const error = JSON.parse(s.events.at(-2)!);
      expect(error.error.code).to.equal('relay_interrupted');
      expect(s.raw).not.to.include('in between');
    } finally {
      watcher.disconnect();
      injector.disconnect();
    }
  });

  it('finishes a stream in flight on SIGTERM, refuses new connections, then exits 0', async () => {
    const env = { REDIS_PREFIX: isolatedPrefix(), LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '40' };
    const [web] = await Promise.all([start('web', env), start('worker', env)]);
    const s = openStream(`${web.url}/v1/chat/completions`, account.apiKey, { ...ask, max_tokens: 30 });
    await s.waitFor(2);
    web.proc.kill('SIGTERM');
    // A new connection (not a pooled one) is refused once the server has stopped listening.
    const port = Number(new URL(web.url).port);
    await eventually(
      () =>
        new Promise<true | undefined>((resolve) => {
          const c = net.connect(port, '127.0.0.1');
          c.once('connect', () => (c.destroy(), resolve(undefined)));
          c.once('error', () => resolve(true));
        }),
      'the web tier to stop accepting connections',
    );
    await s.finished;
    expect(s.events.at(-1)).to.equal('[DONE]');
    const last = JSON.parse(s.events.at(-2)!);
    expect(last.choices[0].finish_reason).to.equal('length');
    expect(await web.exited).to.equal(0);
  });
});
