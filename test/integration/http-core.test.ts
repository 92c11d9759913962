import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import { expect } from 'chai';
import OpenAI from 'openai';
import { AppError } from '../../src/errors.js';
import { defineRoutes } from '../../src/http/route.js';
import { CHAT_BODY_LIMIT_BYTES } from '../../src/chat/request/chat.schema.js';
import { post, get, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';
import { createTestAccount } from '../support/accounts.js';
import { metricValue } from '../support/metrics.js';

/** Requests /hold is holding, each with its body: calling one answers it. */
const holding: (() => void)[] = [];

// A route set that exercises the shared middleware (body parsing, validation, error mapping)
// without depending on any one feature.
const routes = defineRoutes([
  {
    method: 'post',
    path: '/echo',
    operationId: 'echo',
    summary: 'echo',
    tag: 'test',
    auth: 'none',
    body: {
      type: 'object',
      required: ['messages'],
      properties: {
        messages: {
          type: 'array',
          maxItems: 100,
          items: {
            type: 'object',
            required: ['content'],
            properties: { content: { type: 'string', maxLength: 50000 } },
          },
        },
      },
    },
    bodyLimitBytes: CHAT_BODY_LIMIT_BYTES,
    responses: { 200: { description: 'echo' } },
    handler: (ctx) => {
      const body = ctx.state.body as { messages: { content: string }[] };
      ctx.body = { count: body.messages.length, chars: body.messages.reduce((n, m) => n + m.content.length, 0) };
    },
  },
  {
    method: 'post',
    path: '/hold',
    operationId: 'hold',
    summary: 'holds its body until the test lets it go',
    tag: 'test',
    auth: 'none',
    body: { type: 'object' },
    bodyLimitBytes: CHAT_BODY_LIMIT_BYTES,
    responses: { 200: { description: 'released' } },
    handler: async (ctx) => {
      await new Promise<void>((resolve) => holding.push(resolve));
      ctx.body = { released: true };
    },
  },
  {
    method: 'get',
    path: '/boom',
    operationId: 'boom',
    summary: 'throws',
    tag: 'test',
    auth: 'none',
    responses: { 200: { description: 'never' } },
    handler: () => {
      throw new Error('secret internal detail');
    },
  },
  {
    method: 'get',
    path: '/limited',
    operationId: 'limited',
    summary: 'throws a 429',
    tag: 'test',
    auth: 'none',
    responses: { 200: { description: 'never' } },
    handler: () => {
      throw new AppError('rate_limited', 'slow down', { code: 'rate_limit_exceeded', headers: { 'Retry-After': '7' } });
    },
  },
  {
    method: 'get',
    path: '/items/:id',
    operationId: 'item',
    summary: 'echoes its validated path parameter',
    tag: 'test',
    auth: 'none',
    params: { type: 'object', required: ['id'], properties: { id: { type: 'string', pattern: '^[0-9]+$' } } },
    responses: { 200: { description: 'the path parameters' } },
    handler: (ctx) => {
      ctx.body = ctx.state.params;
    },
  },
]);

describe('web tier core', () => {
  let web: TestWeb;
  before(async () => {
    web = await startTestWeb({ routes });
  });
  after(async () => web.close());

  it('puts a request id on every response, keeping a well-formed one from the caller', async () => {
    const a = await get(`${web.url}/nowhere`);
    expect(a.headers.get('x-request-id')).to.match(/^req_[A-Za-z0-9_-]{16}$/);
    const b = await get(`${web.url}/nowhere`, { headers: { 'x-request-id': 'client-trace-123456' } });
    expect(b.headers.get('x-request-id')).to.equal('client-trace-123456');
  });

  it('answers an unknown URL with 404 in the OpenAI error envelope', async () => {
    const r = await get(`${web.url}/v1/nothing-here`);
    expect(r.status).to.equal(404);
    expect(r.body).to.deep.equal({
      error: {
        message: 'Unknown request URL: GET /v1/nothing-here',
        type: 'not_found_error',
        code: 'unknown_url',
        param: null,
      },
    });
  });

  it('answers a wrong method with 405', async () => {
    const r = await get(`${web.url}/echo`);
    expect(r.status).to.equal(405);
    expect(r.body.error.code).to.equal('method_not_allowed');
  });

  it('answers malformed JSON as FastAPI does, at loc ["body", <position>], and names no field in the error envelope', async () => {
    const r = await request('POST', `${web.url}/echo`, {
      raw: '{"model": "x",}',
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).to.equal(422);
    expect(r.body).to.deep.equal({
      detail: [
        {
          loc: ['body', 14],
          msg: 'JSON decode error',
          type: 'json_invalid',
          ctx: { error: 'Expected double-quoted property name' },
        },
      ],
      error: {
        message:
          'Invalid JSON in the request body at position 14 (characters from its start): Expected double-quoted property name',
        type: 'invalid_request_error',
        code: 'json_invalid',
        param: null,
      },
    });
  });

  it('places a body that ends too soon at its length', async () => {
    const r = await request('POST', `${web.url}/echo`, {
      raw: '{"messages": [',
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).to.equal(422);
    expect(r.body.detail[0]).to.deep.include({ loc: ['body', 14], type: 'json_invalid' });
    expect(r.body.error.param).to.equal(null);
  });

  it('answers malformed JSON with 422 json_invalid, not 500', async () => {
    const r = await request('POST', `${web.url}/echo`, {
      raw: '{"messages": [',
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).to.equal(422);
    expect(r.body.detail).to.have.length(1);
    expect(r.body.detail[0].type).to.equal('json_invalid');
    expect(r.body.detail[0].loc[0]).to.equal('body');
  });

  it('answers a missing body with 422 at loc ["body"]', async () => {
    const r = await request('POST', `${web.url}/echo`);
    expect(r.status).to.equal(422);
    expect(r.body).to.deep.equal({
      detail: [{ loc: ['body'], msg: 'Field required', type: 'missing' }],
      error: {
        message: 'Invalid request body: Field required',
        type: 'invalid_request_error',
        code: 'missing',
        param: null,
      },
    });
  });

  it('answers a body that is not JSON with 422', async () => {
    const r = await request('POST', `${web.url}/echo`, {
      raw: 'messages=1',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body']);
  });

  it('accepts the largest valid request: 100 messages of 50,000 characters, every one escaped', async () => {
    const content = '\u0001'.repeat(50_000); // JSON-escaped as \u0001: 6 bytes per character
    const r = await post(`${web.url}/echo`, { messages: Array.from({ length: 100 }, () => ({ content })) });
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.equal({ count: 100, chars: 5_000_000 });
  });

  it('hands the handler the path parameters its params schema validated', async () => {
    const r = await get(`${web.url}/items/42`);
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.equal({ id: '42' });
  });

  it('answers a path parameter that fails its schema with 422 at loc ["path", name]', async () => {
    const r = await get(`${web.url}/items/abc`);
    expect(r.status).to.equal(422);
    expect(r.body).to.deep.equal({
      detail: [{ loc: ['path', 'id'], msg: "String should match pattern '^[0-9]+$'", type: 'string_pattern_mismatch' }],
      error: {
        message: "Invalid 'id': String should match pattern '^[0-9]+$'",
        type: 'invalid_request_error',
        code: 'string_pattern_mismatch',
        param: 'id',
      },
    });
  });

  it('answers a body over the limit with 413 in the error envelope', async () => {
    const small = await startTestWeb({
      routes: routes.map((r) => (r.path === '/echo' ? { ...r, bodyLimitBytes: 2048 } : r)),
    });
    try {
      const r = await post(`${small.url}/echo`, { messages: [{ content: 'x'.repeat(4000) }] });
      expect(r.status).to.equal(413);
      expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'request_too_large' });
    } finally {
      await small.close();
    }
  });

  describe('compressed bodies', () => {
    const json = { messages: [{ content: 'é'.repeat(3000) }] };
    const send = (url: string, body: Buffer, encoding: string) =>
      request('POST', url, {
        raw: body,
        headers: { 'content-type': 'application/json', 'content-encoding': encoding },
      });
    const parsed = () =>
      metricValue(web.app.metrics.registry, 'http_request_body_parsed_bytes_total', { route: '/echo' });

    it('reads a gzip, deflate or br body as the JSON it decompresses to', async () => {
      const text = Buffer.from(JSON.stringify(json));
      for (const [encoding, body] of [
        ['gzip', gzipSync(text)],
        ['deflate', deflateSync(text)],
        ['br', brotliCompressSync(text)],
      ] as const) {
        const r = await send(`${web.url}/echo`, body, encoding);
        expect(r.status, encoding).to.equal(200);
        expect(r.body, encoding).to.deep.equal({ count: 1, chars: 3000 });
      }
    });

    it("refuses a gzip body that decompresses past the route's limit with 413, unparsed", async () => {
      const small = await startTestWeb({
        routes: routes.map((r) => (r.path === '/echo' ? { ...r, bodyLimitBytes: 2048 } : r)),
      });
      try {
        const body = gzipSync(JSON.stringify({ messages: [{ content: 'x'.repeat(4000) }] }));
        expect(body.length).to.be.below(2048);
        const r = await send(`${small.url}/echo`, body, 'gzip');
        expect(r.status).to.equal(413);
        expect(r.body.error).to.deep.equal({
          message: 'Request body is too large: this endpoint reads at most 2048 bytes once decompressed',
          type: 'invalid_request_error',
          code: 'request_too_large',
          param: null,
        });
        const registry = small.app.metrics.registry;
        expect(await metricValue(registry, 'http_request_body_parsed_bytes_total', { route: '/echo' })).to.equal(0);
        expect(await metricValue(registry, 'http_request_body_refusals_total', { reason: 'too_large' })).to.equal(1);
      } finally {
        await small.close();
      }
    });

    it('refuses a br body that inflates past 100 times its size on the wire with 413, unparsed, though under the limit', async () => {
      // 5 MB of JSON (the route reads 60.8 MiB) in a few hundred bytes.
      const body = brotliCompressSync(`{"messages":[]${' '.repeat(5_000_000)}}`);
      expect(body.length).to.be.below(5_000_000 / 100);
      const before = await parsed();
      const r = await send(`${web.url}/echo`, body, 'br');
      expect(r.status).to.equal(413);
      expect(r.body.error.message).to.equal(
        'Request body is too large: a br body may decompress to at most 100 times its size on the wire',
      );
      expect(await parsed()).to.equal(before);
    });

    it('answers 415 for a Content-Encoding it does not decode', async () => {
      const r = await send(`${web.url}/echo`, Buffer.from('{"messages":[]}'), 'compress');
      expect(r.status).to.equal(415);
      expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'unsupported_content_encoding' });
    });

    it('answers 400 for a body that is not what its Content-Encoding says', async () => {
      const r = await send(`${web.url}/echo`, Buffer.from('{"messages":[]}'), 'gzip');
      expect(r.status).to.equal(400);
      expect(r.body.error.code).to.equal('invalid_content_encoding');
      expect(r.body.error.message).to.match(/^The body could not be decompressed as gzip: /);
    });
  });

  it('hides internal errors behind a generic 500 envelope', async () => {
    const r = await get(`${web.url}/boom`);
    expect(r.status).to.equal(500);
    expect(r.body.error.type).to.equal('server_error');
    expect(r.text).not.to.include('secret internal detail');
  });

  it("passes an error's headers through (Retry-After on a 429)", async () => {
    const r = await get(`${web.url}/limited`);
    expect(r.status).to.equal(429);
    expect(r.headers.get('retry-after')).to.equal('7');
    expect(r.body.error).to.deep.equal({
      message: 'slow down',
      type: 'rate_limit_exceeded',
      code: 'rate_limit_exceeded',
      param: null,
    });
  });
});

describe("a process's room for request bodies (HTTP_BODY_BYTES_IN_FLIGHT)", () => {
  let web: TestWeb;
  before(async () => {
    web = await startTestWeb({ routes, env: { HTTP_BODY_BYTES_IN_FLIGHT: String(64 * 1024 * 1024) } });
  });
  after(async () => web.close());
  const bodyOf = (bytes: number) => Buffer.from(`{${' '.repeat(bytes - 2)}}`);
  const hold = (bytes: number) =>
    request('POST', `${web.url}/hold`, { raw: bodyOf(bytes), headers: { 'content-type': 'application/json' } });
  const inFlight = () => metricValue(web.app.metrics.registry, 'http_request_body_bytes_in_flight');

  it('answers 503 with Retry-After, unread, to a body that does not fit beside those held, and reads it once they are answered', async () => {
    const first = hold(40_000_000);
    while (holding.length === 0) await new Promise((resolve) => setImmediate(resolve));
    expect(await inFlight()).to.equal(40_000_000);

    const refused = await hold(30_000_000);
    expect(refused.status).to.equal(503);
    expect(refused.headers.get('retry-after')).to.equal('1');
    expect(refused.body.error).to.include({ type: 'service_unavailable', code: 'server_busy' });

    holding.shift()!();
    expect((await first).status).to.equal(200);
    expect(await inFlight()).to.equal(0);
    const again = hold(30_000_000);
    while (holding.length === 0) await new Promise((resolve) => setImmediate(resolve));
    holding.shift()!();
    expect((await again).status).to.equal(200);
  });
});

describe('the chat route’s body limit', () => {
  let web: TestWeb;
  let apiKey: string;
  before(async () => {
    web = await startTestWeb();
    ({ apiKey } = await createTestAccount(web.app, { tier: 'paid' }));
  });
  after(async () => web.close());

  /**
   * The largest valid request there is: 100 messages whose role (20) and content (50,000) are
   * characters outside the BMP, each escaped as a surrogate pair (12 bytes), padded with JSON
   * whitespace to `bytes`. The model is unknown, so a body that passes parsing and validation
   * gets 404 and nothing is queued.
   */
  function largestValid(bytes: number): Buffer {
    const astral = '\\ud83d\\ude00';
    const message = `{"role":"${astral.repeat(20)}","content":"${astral.repeat(50_000)}"}`;
    const head = `{"model":"no-such-model","messages":[${Array.from({ length: 100 }, () => message).join(',')}]`;
    return Buffer.from(`${head}${' '.repeat(bytes - head.length - 1)}}`);
  }

  it('reads the largest valid chat request, every character escaped, up to the limit', async () => {
    const body = largestValid(CHAT_BODY_LIMIT_BYTES);
    expect(body.length).to.equal(CHAT_BODY_LIMIT_BYTES);
    const r = await request('POST', `${web.url}/v1/chat/completions`, {
      raw: body,
      bearer: apiKey,
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).to.equal(404);
    expect(r.body.error.code).to.equal('model_not_found');
  });

  it('refuses one byte more with 413', async () => {
    const r = await request('POST', `${web.url}/v1/chat/completions`, {
      raw: largestValid(CHAT_BODY_LIMIT_BYTES + 1),
      bearer: apiKey,
      headers: { 'content-type': 'application/json' },
    });
    expect(r.status).to.equal(413);
    expect(r.body.error.code).to.equal('request_too_large');
  });

  it('makes the official SDK report which field failed validation, not "422 status code (no body)"', async () => {
    const client = new OpenAI({ apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const err = await client.chat.completions
      .create({ model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'x'.repeat(50_001) }] })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(err).to.be.instanceOf(OpenAI.UnprocessableEntityError);
    const e = err as InstanceType<typeof OpenAI.UnprocessableEntityError>;
    expect(e.message).to.equal("422 Invalid 'messages[0].content': String should have at most 50000 characters");
    expect(e.param).to.equal('messages[0].content');
    expect(e.type).to.equal('invalid_request_error');
  });
});
