import { expect } from 'chai';
import { defineRoutes } from '../../src/http/route.js';
import { allRoutes } from '../../src/http/routes/index.js';
import { createTestAccount } from '../support/accounts.js';
import { eventually, get, post } from '../support/http.js';
import { captureLogs, type LogLine } from '../support/log-capture.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const boom = defineRoutes([
  {
    method: 'get',
    path: '/boom',
    operationId: 'boom',
    summary: 'throws something nobody decided',
    tag: 'test',
    auth: 'none',
    responses: { 200: { description: 'never' } },
    handler: () => {
      throw new TypeError('cannot read properties of undefined');
    },
  },
]);

describe('what the web tier logs for a failed request', () => {
  const { logger, lines } = captureLogs('info');
  let web: TestWeb;

  before(async () => {
    // No STRIPE_SECRET_KEY: the Stripe-bound endpoints refuse with 503 billing_not_configured.
    web = await startTestWeb({ logger, env: { STRIPE_SECRET_KEY: '' }, routes: [...allRoutes(() => ({})), ...boom] });
  });
  beforeEach(() => lines.splice(0));
  after(async () => web.close());

  const linesFor = (requestId: string | null) =>
    eventually(async () => {
      const mine = lines.filter((l) => l.requestId === requestId);
      return mine.some((l) => l.msg === 'request') ? mine : undefined;
    }, 'the access log line');
  const stackIn = (ls: LogLine[]) => ls.some((l) => JSON.stringify(l).includes('    at '));

  it('logs an expected 503 (billing not configured) as one warn line with its code, without a stack', async () => {
    const { apiKey } = await createTestAccount(web.app);
    const r = await post(`${web.url}/v1/subscription/upgrade`, undefined, { bearer: apiKey });
    expect(r.status).to.equal(503);
    const mine = await linesFor(r.headers.get('x-request-id'));
    expect(mine).to.have.length(1);
    expect(mine[0]).to.include({ level: 40, status: 503, code: 'billing_not_configured' });
    expect(stackIn(mine)).to.equal(false);
  });

  it('logs a 4xx at info, without a stack', async () => {
    const r = await get(`${web.url}/v1/nowhere`);
    expect(r.status).to.equal(404);
    const mine = await linesFor(r.headers.get('x-request-id'));
    expect(mine.map((l) => l.level)).to.deep.equal([30]);
    expect(stackIn(mine)).to.equal(false);
  });

  it('logs a failure nobody decided as an error with its stack, for an operator to look at', async () => {
    const r = await get(`${web.url}/boom`);
    expect(r.status).to.equal(500);
    const mine = await linesFor(r.headers.get('x-request-id'));
    const error = mine.find((l) => l.level === 50);
    expect(error?.msg).to.equal('request failed');
    expect(stackIn([error!])).to.equal(true);
  });
});
