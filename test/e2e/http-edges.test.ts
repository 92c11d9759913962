import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { CHAT_BODY_LIMIT_BYTES } from '../../src/chat/request/chat.schema.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig, uniqueEmail } from '../support/env.js';
import { eventually, post, request } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';
import { RawConnection, rawRequest } from '../support/raw-http.js';
import { startFakeOpenAI, type FakeOpenAI } from '../../src/providers/openai/openai.fake.js';
import { countTokens } from '../../src/providers/tokenizer.js';

// Short receive timeouts, so the tests see them fire; streams must outlive them.
const ENV = {
  REDIS_PREFIX: isolatedPrefix(),
  HTTP_HEADERS_TIMEOUT_MS: '500',
  HTTP_REQUEST_TIMEOUT_MS: '1000',
  LOCAL_MODEL_TTFT_MS: '0',
  LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
};

describe('the web tier at the protocol edges (a live web process)', () => {
  let app: AppContext;
  let web: RoleProcess;
  let worker: RoleProcess;
  let account: TestAccount;
  const open: RawConnection[] = [];
  const connect = () => {
    const c = new RawConnection(web.url);
    open.push(c);
    return c;
  };

  before(async () => {
    app = createContext(testConfig({ REDIS_PREFIX: ENV.REDIS_PREFIX }), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', ENV), startRole('worker', ENV)]);
    account = await createTestAccount(app, { tier: 'paid' });
  });
  afterEach(() => {
    for (const c of open.splice(0)) c.destroy();
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await app?.close();
  });

  const host = () => new URL(web.url).host;
  const chatBody = JSON.stringify({
    model: 'gemini-2.5-flash',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 20,
    stream: true,
  });
  const chatRequest = (extra: [string, string][] = []) =>
    rawRequest(
      'POST',
      '/v1/chat/completions',
      [
        ['Host', host()],
        ['Authorization', `Bearer ${account.apiKey}`],
        ['Content-Type', 'application/json'],
        ['Content-Length', String(Buffer.byteLength(chatBody))],
        ...extra,
      ],
      chatBody,
    );

  describe('Connection: close on a stream', () => {
    it('closes the connection right after [DONE] when the client asked to close', async () => {
      const c = connect();
      c.write(chatRequest([['Connection', 'close']]));
      await c.closed;
      expect(c.text).to.match(/^HTTP\/1\.1 200 /);
      expect(c.text).to.match(/\r\nconnection: close\r\n/i);
      expect(c.text).not.to.match(/keep-alive/i);
      expect(c.text).to.include('data: [DONE]');
    });

    it('keeps the connection for the next request when the client did not ask to close', async () => {
      const c = connect();
      c.write(chatRequest());
      await c.until((t) => t.includes('data: [DONE]') && t.endsWith('0\r\n\r\n'), 'the end of the stream');
      c.write(rawRequest('GET', '/health', [['Host', host()]]));
      const text = await c.until(
        (t) => /HTTP\/1\.1 \d{3} [^\r]*\r\n[\s\S]*HTTP\/1\.1 (200|503) /.test(t),
        'a second response on the same connection',
      );
      expect(text.match(/HTTP\/1\.1 /g)).to.have.length(2);
    });
  });

  describe('requests that never finish arriving', () => {
    it('answers 408 and closes a connection whose body stops short of its Content-Length', async () => {
      const c = connect();
      c.write(
        rawRequest(
          'POST',
          '/v1/auth/signup',
          [
            ['Host', host()],
            ['Content-Type', 'application/json'],
            ['Content-Length', '1000'],
          ],
          '{"name":',
        ),
      );
      await c.closed;
      expect(c.text).to.match(/^HTTP\/1\.1 408 /);
    });

    it('answers 408 and closes a connection whose headers never end', async () => {
      const c = connect();
      c.write(`POST /v1/auth/signup HTTP/1.1\r\nHost: ${host()}\r\nContent-Type: application/json\r\n`);
      await c.closed;
      expect(c.text).to.match(/^HTTP\/1\.1 408 /);
    });

    it('never cuts a stream that lasts longer than the request timeouts', async () => {
      // 60 tokens at 20 a second: three seconds, three times the request timeout.
      const env = { ...ENV, LOCAL_MODEL_TOKENS_PER_SECOND: '20' };
      const [slowWeb, slowWorker] = await Promise.all([startRole('web', env), startRole('worker', env)]);
      try {
        const s = await postStream(
          `${slowWeb.url}/v1/chat/completions`,
          { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'A long story' }], max_tokens: 60 },
          account.apiKey,
        );
        expect(s.status).to.equal(200);
        expect(s.events.at(-1)).to.equal('[DONE]');
        expect(s.chunks.at(-1).choices[0].finish_reason).to.be.oneOf(['stop', 'length']);
      } finally {
        await Promise.all([slowWeb.stop(), slowWorker.stop()]);
      }
    });
  });

  describe('body limits sized to each route', () => {
    const SIGNUP_LIMIT = 16 * 1024;
    /** A valid sign-up body padded with JSON whitespace to exactly `bytes` bytes. */
    const signupOf = (bytes: number) => {
      const json = JSON.stringify({ name: 'Ada', email: uniqueEmail('limit'), organization: 'Engines' });
      return `${json.slice(0, -1)}${' '.repeat(bytes - Buffer.byteLength(json))}}`;
    };

    it('reads a sign-up body of exactly 16 KiB', async () => {
      const body = signupOf(SIGNUP_LIMIT);
      expect(Buffer.byteLength(body)).to.equal(SIGNUP_LIMIT);
      const r = await request('POST', `${web.url}/v1/auth/signup`, {
        raw: body,
        headers: { 'content-type': 'application/json' },
      });
      expect(r.status).to.equal(200);
    });

    it('refuses a sign-up body one byte over 16 KiB with 413 in the error envelope', async () => {
      const r = await request('POST', `${web.url}/v1/auth/signup`, {
        raw: signupOf(SIGNUP_LIMIT + 1),
        headers: { 'content-type': 'application/json' },
      });
      expect(r.status).to.equal(413);
      expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'request_too_large' });
    });

    it('refuses a chat body declared larger than the largest valid request with 413 before reading it', async () => {
      const c = connect();
      c.write(
        rawRequest('POST', '/v1/chat/completions', [
          ['Host', host()],
          ['Authorization', `Bearer ${account.apiKey}`],
          ['Content-Type', 'application/json'],
          ['Content-Length', String(CHAT_BODY_LIMIT_BYTES + 1)],
        ]),
      );
      const text = await c.until((t) => /\r\n\r\n\{.*\}/s.test(t), 'the 413 response');
      expect(text).to.match(/^HTTP\/1\.1 413 /);
      expect(text).to.include('request_too_large');
    });

    it('does not read the body of an unauthenticated chat request at all', async () => {
      const r = await post(`${web.url}/v1/chat/completions`, {
        model: 'x',
        messages: [{ role: 'user', content: 'x'.repeat(1000) }],
      });
      expect(r.status).to.equal(401);
    });
  });

  describe('header and protocol abuse', () => {
    const signupJson = () => JSON.stringify({ name: 'Ada', email: uniqueEmail('abuse'), organization: 'Engines' });
    const signupRequest = (body: string | Buffer, extra: [string, string][] = []) =>
      Buffer.concat([
        Buffer.from(
          rawRequest('POST', '/v1/auth/signup', [
            ['Host', host()],
            ['Content-Type', 'application/json'],
            ['Content-Length', String(Buffer.byteLength(body))],
            ...extra,
          ]),
        ),
        Buffer.isBuffer(body) ? body : Buffer.from(body),
      ]);
    const statusOf = (text: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1]);

    it('answers headers over 16 KiB with 431 and closes', async () => {
      const c = connect();
      c.write(
        rawRequest('GET', '/health', [
          ['Host', host()],
          ['X-Padding', 'x'.repeat(20_000)],
        ]),
      );
      await c.closed;
      expect(statusOf(c.text)).to.equal(431);
    });

    it('serves a request with many small headers, and refuses thousands of them with 431', async () => {
      const many = (n: number): [string, string][] => Array.from({ length: n }, (_, i) => [`X-H${i}`, 'v']);
      const ok = connect();
      ok.write(rawRequest('GET', '/health', [['Host', host()], ['Connection', 'close'], ...many(500)]));
      await ok.closed;
      expect(statusOf(ok.text)).to.be.oneOf([200, 503]);
      const refused = connect();
      refused.write(rawRequest('GET', '/health', [['Host', host()], ...many(3000)]));
      await refused.closed;
      expect(statusOf(refused.text)).to.equal(431);
    });

    it('refuses two Authorization headers with 400 instead of picking one', async () => {
      const c = connect();
      c.write(
        chatRequest([
          ['Authorization', 'Bearer sk-svc-someone-else'],
          ['Connection', 'close'],
        ]),
      );
      await c.closed;
      expect(statusOf(c.text)).to.equal(400);
      expect(c.text).to.include('duplicate_authorization');
    });

    it('answers pipelined requests in order on one connection', async () => {
      const c = connect();
      const bodies = [signupJson(), signupJson()];
      c.write(
        Buffer.concat([
          signupRequest(bodies[0]!),
          Buffer.from(rawRequest('GET', '/v1/nowhere', [['Host', host()]])),
          signupRequest(bodies[1]!, [['Connection', 'close']]),
        ]),
      );
      await c.closed;
      const statuses = [...c.text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]));
      expect(statuses).to.deep.equal([200, 404, 200]);
    });

    it('honours Expect: 100-continue', async () => {
      const c = connect();
      const body = signupJson();
      c.write(
        rawRequest('POST', '/v1/auth/signup', [
          ['Host', host()],
          ['Content-Type', 'application/json'],
          ['Content-Length', String(Buffer.byteLength(body))],
          ['Expect', '100-continue'],
          ['Connection', 'close'],
        ]),
      );
      await c.until((t) => t.includes('100 Continue'), '100 Continue');
      c.write(body);
      await c.closed;
      expect([...c.text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]))).to.deep.equal([100, 200]);
    });

    it('refuses a JSON body that is not valid UTF-8 with 422 instead of altering it', async () => {
      const body = Buffer.concat([
        Buffer.from('{"name":"Ada '),
        Buffer.from([0xc3, 0x28]),
        Buffer.from(`","email":"${uniqueEmail('utf8')}","organization":"E"}`),
      ]);
      const c = connect();
      c.write(signupRequest(body, [['Connection', 'close']]));
      await c.closed;
      expect(statusOf(c.text)).to.equal(422);
      expect(c.text).to.include('Body is not valid UTF-8');
    });

    it('accepts a multi-byte character split across two TCP segments', async () => {
      const address = uniqueEmail('split');
      const body = Buffer.from(JSON.stringify({ name: 'Zoë 🚀', email: address, organization: 'E' }));
      const at = body.indexOf(Buffer.from('🚀')) + 2;
      const c = connect();
      const whole = signupRequest(body, [['Connection', 'close']]);
      const split = whole.length - body.length + at;
      c.socket.setNoDelay(true);
      await new Promise<void>((r) => c.socket.write(whole.subarray(0, split), () => r()));
      c.write(whole.subarray(split));
      await c.closed;
      expect(statusOf(c.text)).to.equal(200);
      const [account] = await app.db.selectFrom('accounts').select('name').where('email', '=', address).execute();
      expect(account?.name).to.equal('Zoë 🚀');
    });
  });
});

describe('a stream whose client stops reading (a live web process, a fake OpenAI upstream)', () => {
  let app: AppContext;
  let openai: FakeOpenAI;
  let web: RoleProcess;
  let worker: RoleProcess;
  let account: TestAccount;

  before(async () => {
    openai = await startFakeOpenAI();
    const env = {
      REDIS_PREFIX: isolatedPrefix(),
      MODEL_BACKEND: 'catalog',
      OPENAI_BASE_URL: `${openai.url}/v1`,
      OPENAI_API_KEY: openai.apiKey,
      STREAM_MAX_BUFFERED_BYTES: String(256 * 1024),
    };
    app = createContext(testConfig(env), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', env), startRole('worker', env)]);
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => {
    await Promise.all([web?.stop(), worker?.stop()]);
    await openai?.close();
    await app?.close();
  });

  it('ends the stream once the client is too far behind, stops the upstream and bills what was produced', async () => {
    // 3,000 tokens of 16,000 characters, 3 ms apart: about 50 MB over ten seconds, far more than
    // the socket buffers on the way (a client that reads nothing keeps its receive window small),
    // at a pace the relay carries easily.
    openai.script({
      tokens: Array.from({ length: 3000 }, () => 'x'.repeat(16_000)),
      tokenDelayMs: 3,
      usage: { prompt: 10, completion: 3000 },
    });
    const body = JSON.stringify({
      model: 'gpt-4.1-mini',
      messages: [{ role: 'user', content: 'Say a lot' }],
      stream: true,
    });
    const c = new RawConnection(web.url, { paused: true });
    try {
      c.write(
        rawRequest(
          'POST',
          '/v1/chat/completions',
          [
            ['Host', new URL(web.url).host],
            ['Authorization', `Bearer ${account.apiKey}`],
            ['Content-Type', 'application/json'],
            ['Content-Length', String(Buffer.byteLength(body))],
          ],
          body,
        ),
      );
      // The client reads nothing. The worker must stop reading the upstream well before its end.
      const upstream = await eventually(async () => openai.lastRequest, 'the upstream request');
      await upstream.closed;
      expect(upstream.closedEarly).to.equal(true);
      expect(web.output(), web.output().slice(-3000)).to.include('stream client stopped reading');
      c.socket.resume();
      await c.closed;
      const [row] = await eventually(async () => {
        const rows = await app.db
          .selectFrom('usage_events')
          .selectAll()
          .where('account_id', '=', account.account.id)
          .execute();
        return rows.length > 0 ? rows : undefined;
      }, 'the usage row');
      expect(row).to.include({ status: 'cancelled' });
      // Billed by the tokens produced before the stop, well short of the whole answer.
      expect(row!.completion_tokens)
        .to.be.greaterThan(0)
        .and.below(3000 * countTokens('x'.repeat(16_000)));
    } finally {
      c.destroy();
    }
  });
});
