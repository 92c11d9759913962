import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { LIVENESS_PATH, startMetricsServer } from '../../src/metrics-server.js';
import type { BackgroundService } from '../../src/lifecycle.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The probes a container platform asks: liveness checks nothing outside the process, readiness
// checks what this web process needs to serve, and neither waits for a completion worker, which
// /health does. A prefix of its own: no worker of another test is registered under it.

describe('/health/live and /health/ready: the probes', () => {
  let web: TestWeb;

  before(async () => {
    web = await startTestWeb({ env: { REDIS_PREFIX: isolatedPrefix() } });
  });
  after(async () => web?.close());

  it('answers /health/live 200 {"status":"ok"}, never cached', async () => {
    const r = await get(`${web.url}/health/live`);
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.equal({ status: 'ok' });
    expect(r.headers.get('cache-control')).to.equal('no-store');
  });

  it('is ready with no live worker, while /health is 503 no_live_worker', async () => {
    const health = await get(`${web.url}/health`);
    expect(health.status).to.equal(503);
    expect(health.body).to.deep.equal({ status: 'unavailable', reason: 'no_live_worker' });
    const ready = await get(`${web.url}/health/ready`);
    expect(ready.status).to.equal(200);
    expect(ready.body).to.deep.equal({ status: 'ok' });
    expect(ready.headers.get('cache-control')).to.equal('no-store');
  });

  it('lists both probes in /openapi.json, with no credential', async () => {
    const doc = (await get(`${web.url}/openapi.json`)).body;
    expect(doc.paths['/health/live'].get.security ?? []).to.deep.equal([]);
    expect(doc.paths['/health/ready'].get.responses).to.include.keys('200', '503');
  });
});

describe('a worker or scheduler metrics port: /health/live beside /metrics', () => {
  let app: AppContext;
  let server: BackgroundService & { url: string };

  before(async () => {
    app = createContext(testConfig({ REDIS_PREFIX: isolatedPrefix() }), { role: 'worker' });
    server = await startMetricsServer(app, 0);
  });
  after(async () => {
    await server?.stop();
    await app?.close();
  });

  it(`answers ${LIVENESS_PATH} 200 {"status":"ok"}`, async () => {
    const r = await get(server.url.replace(/\/metrics$/, LIVENESS_PATH));
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.equal({ status: 'ok' });
  });

  it('still serves /metrics and answers 404 elsewhere', async () => {
    expect((await get(server.url)).status).to.equal(200);
    expect((await get(server.url.replace(/\/metrics$/, '/health'))).status).to.equal(404);
  });
});
