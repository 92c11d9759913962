import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { OPERATOR_SESSION_MS } from '../../src/http/admin/operator-credential.js';
import { completionShards } from '../../src/infra/queues.js';
import { isolatedPrefix } from '../support/env.js';
import { get, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const TOKEN = 'operator-token-0123456789abcdef0123456789';
const HTML = { accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8' };

/** Posts the dashboard's login form as a browser does, without following the redirect. */
async function postLoginForm(url: string, token: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${url}/admin/queues/login`, {
    method: 'POST',
    redirect: 'manual',
    headers: { 'content-type': 'application/x-www-form-urlencoded', ...HTML, ...headers },
    body: new URLSearchParams({ token }).toString(),
  });
}

/** The session cookie a successful sign-in sets, as `name=value` to send back. */
async function signIn(url: string): Promise<string> {
  const res = await postLoginForm(url, TOKEN);
  expect(res.status).to.equal(303);
  const cookie = res.headers.getSetCookie().find((c) => c.startsWith('admin_session='));
  return cookie!.split(';')[0]!;
}

interface BoardQueue {
  name: string;
  description?: string;
  counts: Record<string, number>;
  readOnlyMode: boolean;
}

describe('the queue dashboard at /admin/queues', function () {
  this.timeout(20_000);

  describe('with ADMIN_TOKEN set (read-only by default)', () => {
    let web: TestWeb;
    const clock = new ManualClock(Date.now());
    before(async () => {
      // A Redis prefix of its own: the jobs queued here are seen by no worker of another test.
      web = await startTestWeb({
        env: { ADMIN_TOKEN: TOKEN, REDIS_PREFIX: isolatedPrefix(), REDIS_SHARDS: '2', TRUST_PROXY: 'true' },
        clock,
      });
      const shard0 = web.app.queue(completionShards(web.app.config)[0]!);
      await shard0.add('completion', { note: 'waiting for a worker' });
      await shard0.add('completion', { note: 'waiting for a worker' });
    });
    after(async () => web?.close());

    it('refuses a JSON request without a credential: 401 in the error envelope', async () => {
      const r = await get(`${web.url}/admin/queues/api/queues`);
      expect(r.status).to.equal(401);
      expect(r.headers.get('www-authenticate')).to.equal('Bearer');
      expect(r.body.error).to.include({ type: 'authentication_error', code: 'missing_credential', param: null });
      expect(r.body.error.message).to.match(/operator token/);
    });

    it('refuses a wrong bearer token: 401 invalid_token', async () => {
      const r = await get(`${web.url}/admin/queues/api/queues`, { bearer: `${TOKEN}x` });
      expect(r.status).to.equal(401);
      expect(r.headers.get('www-authenticate')).to.equal('Bearer error="invalid_token"');
      expect(r.body.error).to.include({ type: 'authentication_error', code: 'invalid_token' });
    });

    it('shows a browser asking for the page without a credential the login form, with 401', async () => {
      const r = await get(`${web.url}/admin/queues`, { headers: HTML });
      expect(r.status).to.equal(401);
      expect(r.headers.get('content-type')).to.match(/^text\/html/);
      expect(r.headers.get('cache-control')).to.equal('no-store');
      expect(r.text).to.contain('<form method="post" action="/admin/queues/login">');
      expect(r.text).to.contain('name="token" type="password"');
    });

    it('lists every queue of the queue factory with its counts, each completion shard on its own, for the bearer token', async () => {
      const r = await get<{ queues: BoardQueue[] }>(`${web.url}/admin/queues/api/queues`, { bearer: TOKEN });
      expect(r.status).to.equal(200);
      expect(r.body.queues.map((q) => q.name)).to.deep.equal([
        'completions.0',
        'completions.1',
        'scheduled',
        'invoicing',
      ]);
      const shard0 = r.body.queues.find((q) => q.name === 'completions.0')!;
      expect(shard0.counts).to.include({ waiting: 2, active: 0, failed: 0 });
      expect(shard0.description).to.match(/^Chat completion requests .*\(shard 1 of 2\)$/);
      expect(r.body.queues.every((q) => q.readOnlyMode)).to.equal(true);
    });

    it('signs an operator in at the form with a session cookie: HttpOnly, SameSite=Strict, scoped to the dashboard, not Secure over http', async () => {
      const res = await postLoginForm(web.url, TOKEN);
      expect(res.status).to.equal(303);
      expect(res.headers.get('location')).to.equal('/admin/queues');
      const cookie = res.headers.getSetCookie().find((c) => c.startsWith('admin_session='))!;
      expect(cookie).to.match(/; path=\/admin\/queues;/);
      expect(cookie).to.match(/; samesite=strict/);
      expect(cookie).to.match(/; httponly/);
      expect(cookie).not.to.match(/; secure/);
      expect(cookie).not.to.contain(TOKEN);
    });

    it('lists the completion queue with its counts for the session cookie', async () => {
      const cookie = await signIn(web.url);
      const r = await get<{ queues: BoardQueue[] }>(`${web.url}/admin/queues/api/queues`, { headers: { cookie } });
      expect(r.status).to.equal(200);
      expect(r.body.queues.find((q) => q.name === 'completions.0')!.counts).to.include({ waiting: 2 });
    });

    it('marks the session cookie Secure when the request came over https (X-Forwarded-Proto from a trusted proxy)', async () => {
      const res = await postLoginForm(web.url, TOKEN, { 'x-forwarded-proto': 'https' });
      expect(res.status).to.equal(303);
      expect(res.headers.getSetCookie().find((c) => c.startsWith('admin_session='))).to.match(/; secure/);
    });

    it('refuses a wrong token at the form: the form again with 401, and no cookie', async () => {
      const res = await postLoginForm(web.url, 'not-the-operator-token-0123456789abcdef');
      expect(res.status).to.equal(401);
      expect(res.headers.getSetCookie()).to.deep.equal([]);
      const page = await res.text();
      expect(page).to.contain('That is not the operator token.');
      expect(page).to.contain('<form method="post" action="/admin/queues/login">');
    });

    it('refuses a forged session cookie', async () => {
      const r = await get(`${web.url}/admin/queues/api/queues`, {
        headers: { cookie: `admin_session=9999999999.${'A'.repeat(43)}` },
      });
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('missing_credential');
    });

    it('ends a session once its lifetime has passed', async () => {
      const cookie = await signIn(web.url);
      clock.advance(OPERATOR_SESSION_MS + 1000);
      const r = await get(`${web.url}/admin/queues/api/queues`, { headers: { cookie } });
      expect(r.status).to.equal(401);
    });

    it('clears the session cookie at a same-origin POST to log-out, and sends the browser back with 303', async () => {
      const res = await fetch(`${web.url}/admin/queues/logout`, {
        method: 'POST',
        redirect: 'manual',
        headers: { cookie: await signIn(web.url), origin: web.url, ...HTML },
      });
      expect(res.status).to.equal(303);
      expect(res.headers.get('location')).to.equal('/admin/queues');
      expect(res.headers.getSetCookie().find((c) => c.startsWith('admin_session='))).to.match(
        /^admin_session=; path=\/admin\/queues; expires=Thu, 01 Jan 1970/,
      );
    });

    it('keeps the session at a GET of the log-out link, which shows a page whose button posts the log-out', async () => {
      const cookie = await signIn(web.url);
      const res = await fetch(`${web.url}/admin/queues/logout`, { redirect: 'manual', headers: { cookie, ...HTML } });
      expect(res.status).to.equal(200);
      expect(res.headers.getSetCookie()).to.deep.equal([]);
      expect(await res.text()).to.contain('<form method="post" action="/admin/queues/logout">');
      expect((await get(`${web.url}/admin/queues/api/queues`, { headers: { cookie } })).status).to.equal(200);
    });

    it('refuses a log-out POST from another site with 403 cross_site_request, and the session goes on', async () => {
      const cookie = await signIn(web.url);
      const r = await request('POST', `${web.url}/admin/queues/logout`, {
        headers: { cookie, origin: 'https://evil.example' },
        redirect: 'manual',
      });
      expect(r.status).to.equal(403);
      expect(r.body.error).to.include({ type: 'permission_error', code: 'cross_site_request' });
      expect(r.headers.getSetCookie()).to.deep.equal([]);
      expect((await get(`${web.url}/admin/queues/api/queues`, { headers: { cookie } })).status).to.equal(200);
    });

    it('refuses a write action in read-only mode with 405 in the service’s error envelope, and the queue runs on', async () => {
      const r = await request('PUT', `${web.url}/admin/queues/api/queues/completions.0/pause`, { bearer: TOKEN });
      expect(r.status).to.equal(405);
      expect(r.headers.get('allow')).to.equal('GET, HEAD');
      expect(r.body).to.deep.equal({
        error: {
          message:
            'The queue dashboard is read-only: it changes no queue or job (ADMIN_QUEUES_WRITABLE=true on the web tier allows it).',
          type: 'invalid_request_error',
          code: 'queue_dashboard_read_only',
          param: null,
        },
      });
      expect(await web.app.queue(completionShards(web.app.config)[0]!).isPaused()).to.equal(false);
      // Every write of the board's API, whatever its method.
      for (const [method, path] of [
        ['DELETE', '/admin/queues/api/queues/completions.0/empty'],
        ['PUT', '/admin/queues/api/queues/completions.0/retry/failed'],
        ['POST', '/admin/queues/api/queues/completions.0/add'],
      ] as const) {
        const w = await request(method, `${web.url}${path}`, { bearer: TOKEN, json: {} });
        expect(w.status, `${method} ${path}`).to.equal(405);
        expect(w.body.error?.code, `${method} ${path}`).to.equal('queue_dashboard_read_only');
      }
      expect(await web.app.queue(completionShards(web.app.config)[0]!).getWaitingCount()).to.equal(2);
    });

    it('asks for the operator token before it says the dashboard is read-only', async () => {
      const r = await request('PUT', `${web.url}/admin/queues/api/queues/completions.0/pause`);
      expect(r.status).to.equal(401);
      expect(r.body.error.code).to.equal('missing_credential');
    });

    it('serves the page and every script and stylesheet it names, under a policy that allows only its own origin', async () => {
      const page = await get(`${web.url}/admin/queues`, { bearer: TOKEN, headers: HTML });
      expect(page.status).to.equal(200);
      expect(page.headers.get('content-security-policy'))
        .to.contain("script-src 'self'")
        .and.to.contain("frame-ancestors 'none'");
      expect(page.text).to.contain('<base href="/admin/queues/"');
      expect(page.text).not.to.contain('fonts.googleapis.com');
      const assets = [...page.text.matchAll(/(?:src|href)="(static\/[^"]+\.(?:js|css))"/g)].map((m) => m[1]!);
      expect(assets.filter((a) => a.endsWith('.js'))).to.have.length.greaterThan(0);
      expect(assets.filter((a) => a.endsWith('.css'))).to.have.length.greaterThan(0);
      for (const asset of assets) {
        const r = await get(`${web.url}/admin/queues/${asset}`, { bearer: TOKEN });
        expect(r.status, asset).to.equal(200);
        expect(r.headers.get('content-type'), asset).to.match(asset.endsWith('.js') ? /javascript/ : /^text\/css/);
      }
    });

    it('leaves the API as it was beside the dashboard: an unknown URL is still a 404 in the error envelope', async () => {
      const r = await get(`${web.url}/admin/queues-elsewhere`, { bearer: TOKEN });
      expect(r.status).to.equal(404);
      expect(r.body.error.code).to.equal('unknown_url');
    });
  });

  describe('with ADMIN_QUEUES_WRITABLE=true', () => {
    let web: TestWeb;
    before(async () => {
      web = await startTestWeb({
        env: { ADMIN_TOKEN: TOKEN, ADMIN_QUEUES_WRITABLE: 'true', REDIS_PREFIX: isolatedPrefix() },
      });
    });
    after(async () => web?.close());

    it('lets the operator pause and resume a queue', async () => {
      const queue = web.app.queue('invoicing');
      expect(
        (await request('PUT', `${web.url}/admin/queues/api/queues/invoicing/pause`, { bearer: TOKEN })).status,
      ).to.equal(200);
      expect(await queue.isPaused()).to.equal(true);
      expect(
        (await request('PUT', `${web.url}/admin/queues/api/queues/invoicing/resume`, { bearer: TOKEN })).status,
      ).to.equal(200);
      expect(await queue.isPaused()).to.equal(false);
    });
  });

  describe('without ADMIN_TOKEN', () => {
    let web: TestWeb;
    before(async () => {
      web = await startTestWeb({ env: { ADMIN_TOKEN: '' } });
    });
    after(async () => web?.close());

    it('does not exist: 404 for the page and its API, whatever the credential', async () => {
      for (const path of ['/admin/queues', '/admin/queues/api/queues', '/admin/queues/login']) {
        const r = await get(`${web.url}${path}`, { bearer: TOKEN, headers: HTML });
        expect(r.status, path).to.equal(404);
        expect(r.body.error.code, path).to.equal('unknown_url');
      }
    });
  });
});
