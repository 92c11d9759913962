import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { CHAT_BODY_LIMIT_BYTES } from '../../src/chat/chat.schema.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig, uniqueEmail } from '../support/env.js';
import { post, request } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { postStream } from '../support/sse.js';
import { RawConnection, rawRequest } from '../support/raw-http.js';

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
  const chatBody = JSON.stringify({ model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 20, stream: true });
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
      const text = await c.until((t) => /HTTP\/1\.1 \d{3} [^\r]*\r\n[\s\S]*HTTP\/1\.1 (200|503) /.test(t), 'a second response on the same connection');
      expect(text.match(/HTTP\/1\.1 /g)).to.have.length(2);
    });
  });

  describe('requests that never finish arriving', () => {
    it('answers 408 and closes a connection whose body stops short of its Content-Length', async () => {
      const c = connect();
      c.write(rawRequest('POST', '/v1/auth/signup', [['Host', host()], ['Content-Type', 'application/json'], ['Content-Length', '1000']], '{"name":'));
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
        const s = await postStream(`${slowWeb.url}/v1/chat/completions`, { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'A long story' }], max_tokens: 60 }, account.apiKey);
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
      const r = await request('POST', `${web.url}/v1/auth/signup`, { raw: body, headers: { 'content-type': 'application/json' } });
      expect(r.status).to.equal(200);
    });

    it('refuses a sign-up body one byte over 16 KiB with 413 in the error envelope', async () => {
      const r = await request('POST', `${web.url}/v1/auth/signup`, { raw: signupOf(SIGNUP_LIMIT + 1), headers: { 'content-type': 'application/json' } });
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
      const r = await post(`${web.url}/v1/chat/completions`, { model: 'x', messages: [{ role: 'user', content: 'x'.repeat(1000) }] });
      expect(r.status).to.equal(401);
    });
  });
});
