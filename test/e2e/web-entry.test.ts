import { expect } from 'chai';
import { OPERATOR_TOKEN } from '../support/env.js';
import { get, post } from '../support/http.js';
import { runToExit, startRole, type RoleProcess } from '../support/processes.js';

describe('the web entry point as a process', () => {
  let web: RoleProcess;
  let worker: RoleProcess;
  before(async () => {
    // A completion worker too: /health is 200 only while one is live.
    [web, worker] = await Promise.all([startRole('web', { ADMIN_TOKEN: OPERATOR_TOKEN }), startRole('worker')]);
  });
  after(async () => {
    await Promise.all([web.stop(), worker.stop()]);
  });

  it('serves /health with 200 and, to the operator, the state of each dependency', async () => {
    const r = await get(`${web.url}/health`, { bearer: OPERATOR_TOKEN });
    expect(r.status).to.equal(200);
    expect(r.body.status).to.equal('ok');
    expect(r.body.checks.postgres.status).to.equal('ok');
    expect(r.body.checks.redis.status).to.equal('ok');
    expect(r.body.checks.queue.status).to.equal('ok');
    expect(r.body.checks.workers.status).to.equal('ok');
    expect(r.body.down).to.deep.equal([]);
  });

  it('serves /metrics as JSON by default', async () => {
    await get(`${web.url}/health`);
    const r = await get(`${web.url}/metrics`);
    expect(r.status).to.equal(200);
    expect(r.headers.get('content-type')).to.match(/application\/json/);
    const names = (r.body as { name: string }[]).map((m) => m.name);
    expect(names).to.include.members([
      'http_requests_total',
      'http_request_duration_seconds',
      'process_cpu_user_seconds_total',
    ]);
  });

  it('serves /metrics in the Prometheus text format when a scraper asks for it', async () => {
    const accept = 'application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1';
    const r = await get(`${web.url}/metrics`, { headers: { accept } });
    expect(r.status).to.equal(200);
    expect(r.headers.get('content-type')).to.match(/^text\/plain/);
    expect(r.text).to.match(/^# HELP http_requests_total/m);
    expect(r.text).to.match(/http_requests_total\{method="GET",route="\/health",status="200",role="web"\} \d+/);
  });

  it('serves /openapi.json at version 1.0.0 and a /docs page that renders it', async () => {
    const r = await get(`${web.url}/openapi.json`);
    expect(r.status).to.equal(200);
    expect(r.body.openapi).to.equal('3.1.0');
    expect(r.body.info.version).to.equal('1.0.0');
    expect(r.body.paths['/health'].get.operationId).to.equal('health');
    const docs = await get(`${web.url}/docs`);
    expect(docs.status).to.equal(200);
    expect(docs.text).to.include('/openapi.json');
    const asset = await get(`${web.url}/docs/assets/swagger-ui-bundle.js`);
    expect(asset.status).to.equal(200);
  });

  it("answers a sign-up with a bad body with 422 and the interface's HTTPValidationError body", async () => {
    const r = await post(`${web.url}/v1/auth/signup`, { name: 'n'.repeat(101), email: 'not-an-email' });
    expect(r.status).to.equal(422);
    expect(r.headers.get('content-type')).to.match(/^application\/json/);
    expect(r.body).to.deep.equal({
      detail: [
        { loc: ['body', 'organization'], msg: 'Field required', type: 'missing' },
        { loc: ['body', 'name'], msg: 'String should have at most 100 characters', type: 'string_too_long' },
        {
          loc: ['body', 'email'],
          msg: 'value is not a valid email address: it needs a mailbox name, an @ and a domain, as in ada@example.com',
          type: 'value_error',
        },
      ],
      error: {
        message: "Invalid 'organization': Field required (and 2 more: see detail)",
        type: 'invalid_request_error',
        code: 'missing',
        param: 'organization',
      },
    });
  });

  it('exits at once with one line naming a misconfigured variable', async () => {
    const r = await runToExit('web', { PORT: 'not-a-port' });
    expect(r.code).to.equal(78);
    expect(r.stderr.trim()).to.equal('configuration error: PORT must be an integer from 0 to 65535 (got "not-a-port")');
  });

  it('stops cleanly on SIGTERM', async () => {
    const other = await startRole('web');
    expect(await other.stop('SIGTERM')).to.equal(0);
  });
});
