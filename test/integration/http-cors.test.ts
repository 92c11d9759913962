import { expect } from 'chai';
import { createTestAccount } from '../support/accounts.js';
import { request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const FRONTEND = 'https://app.example.com';

describe('CORS for the web frontend', () => {
  let web: TestWeb;
  let jwt: string;
  before(async () => {
    web = await startTestWeb({ env: { CORS_ORIGINS: `${FRONTEND},http://localhost:5173` } });
    ({ jwt } = await createTestAccount(web.app));
  });
  after(async () => web.close());

  const preflight = (origin: string) =>
    request('OPTIONS', `${web.url}/v1/subscription/info`, {
      headers: { origin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
    });

  it('answers a configured origin’s preflight with that origin, the Authorization header and a max age', async () => {
    const r = await preflight(FRONTEND);
    expect(r.status).to.equal(204);
    expect(r.headers.get('access-control-allow-origin')).to.equal(FRONTEND);
    expect(r.headers.get('access-control-allow-headers')).to.match(/authorization/i);
    expect(r.headers.get('access-control-allow-methods')).to.include('GET');
    expect(r.headers.get('access-control-max-age')).to.equal('600');
    expect(r.headers.get('access-control-allow-credentials')).to.equal(null);
  });

  it('lets a configured origin read the answer and the request id and rate-limit headers', async () => {
    const r = await request('GET', `${web.url}/v1/subscription/info`, { bearer: jwt, headers: { origin: FRONTEND } });
    expect(r.status).to.equal(200);
    expect(r.headers.get('access-control-allow-origin')).to.equal(FRONTEND);
    expect(r.headers.get('vary')).to.match(/origin/i);
    expect(r.headers.get('access-control-expose-headers'))
      .to.include('X-Request-Id')
      .and.include('X-RateLimit-Remaining');
  });

  it('keeps the CORS headers on an error answer, so the frontend can read the error', async () => {
    const r = await request('GET', `${web.url}/v1/subscription/info`, { headers: { origin: FRONTEND } });
    expect(r.status).to.equal(401);
    expect(r.headers.get('access-control-allow-origin')).to.equal(FRONTEND);
  });

  it('gives any other origin nothing: no allow-origin on the preflight or the answer', async () => {
    for (const origin of ['https://evil.example.com', 'https://app.example.com.evil.com', 'null']) {
      expect((await preflight(origin)).headers.get('access-control-allow-origin'), origin).to.equal(null);
      const r = await request('GET', `${web.url}/v1/subscription/info`, { bearer: jwt, headers: { origin } });
      expect(r.headers.get('access-control-allow-origin'), origin).to.equal(null);
    }
  });

  it('allows no origin at all when none is configured', async () => {
    const closed = await startTestWeb();
    try {
      const r = await request('OPTIONS', `${closed.url}/v1/subscription/info`, {
        headers: { origin: FRONTEND, 'access-control-request-method': 'GET' },
      });
      expect(r.headers.get('access-control-allow-origin')).to.equal(null);
    } finally {
      await closed.close();
    }
  });
});
