import { expect } from 'chai';
import { AppError } from '../../src/errors.js';
import { defineRoutes } from '../../src/http/route.js';
import { post, get, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

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
      properties: { messages: { type: 'array', maxItems: 100, items: { type: 'object', required: ['content'], properties: { content: { type: 'string', maxLength: 50000 } } } } },
    },
    responses: { 200: { description: 'echo' } },
    handler: (ctx) => {
      const body = ctx.state.body as { messages: { content: string }[] };
      ctx.body = { count: body.messages.length, chars: body.messages.reduce((n, m) => n + m.content.length, 0) };
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
    expect(r.body).to.deep.equal({ error: { message: 'Unknown request URL: GET /v1/nothing-here', type: 'not_found_error', code: 'unknown_url', param: null } });
  });

  it('answers a wrong method with 405', async () => {
    const r = await get(`${web.url}/echo`);
    expect(r.status).to.equal(405);
    expect(r.body.error.code).to.equal('method_not_allowed');
  });

  it('answers malformed JSON with 422 json_invalid, not 500', async () => {
    const r = await request('POST', `${web.url}/echo`, { raw: '{"messages": [', headers: { 'content-type': 'application/json' } });
    expect(r.status).to.equal(422);
    expect(r.body.detail).to.have.length(1);
    expect(r.body.detail[0].type).to.equal('json_invalid');
    expect(r.body.detail[0].loc[0]).to.equal('body');
  });

  it('answers a missing body with 422 at loc ["body"]', async () => {
    const r = await request('POST', `${web.url}/echo`);
    expect(r.status).to.equal(422);
    expect(r.body).to.deep.equal({ detail: [{ loc: ['body'], msg: 'Field required', type: 'missing' }] });
  });

  it('answers a body that is not JSON with 422', async () => {
    const r = await request('POST', `${web.url}/echo`, { raw: 'messages=1', headers: { 'content-type': 'application/x-www-form-urlencoded' } });
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body']);
  });

  it('accepts the largest valid request: 100 messages of 50,000 characters, every one escaped', async () => {
    const content = '\u0001'.repeat(50_000); // JSON-escaped as \u0001: 6 bytes per character
    const r = await post(`${web.url}/echo`, { messages: Array.from({ length: 100 }, () => ({ content })) });
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.equal({ count: 100, chars: 5_000_000 });
  });

  it('answers a body over the limit with 413 in the error envelope', async () => {
    const small = await startTestWeb({ routes, env: { BODY_LIMIT_BYTES: '2048' } });
    try {
      const r = await post(`${small.url}/echo`, { messages: [{ content: 'x'.repeat(4000) }] });
      expect(r.status).to.equal(413);
      expect(r.body.error).to.include({ type: 'invalid_request_error', code: 'request_too_large' });
    } finally {
      await small.close();
    }
  });

  it('hides internal errors behind a generic 500 envelope', async () => {
    const r = await get(`${web.url}/boom`);
    expect(r.status).to.equal(500);
    expect(r.body.error.type).to.equal('server_error');
    expect(r.text).not.to.include('secret internal detail');
  });

  it('passes an error\'s headers through (Retry-After on a 429)', async () => {
    const r = await get(`${web.url}/limited`);
    expect(r.status).to.equal(429);
    expect(r.headers.get('retry-after')).to.equal('7');
    expect(r.body.error).to.deep.equal({ message: 'slow down', type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', param: null });
  });
});
