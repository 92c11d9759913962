import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, testConfig } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { rolesPerTest } from '../support/processes.js';

// A completion that stalls its worker is not handed to worker after worker: the stalled worker's
// watchdog ends it and marks its jobs, and the take-over ends them as failed.

const usageRows = (app: AppContext, accountId: string) =>
  eventually(async () => {
    const rows = await app.db.selectFrom('usage_events').selectAll().where('account_id', '=', accountId).execute();
    return rows.length > 0 ? rows : undefined;
  }, 'the usage row');

describe('a completion that stalls or keeps killing its worker', function () {
  this.timeout(90_000);
  let app: AppContext;
  let account: TestAccount;
  const start = rolesPerTest();

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
  });
  beforeEach(async () => {
    account = await createTestAccount(app, { tier: 'paid' });
  });
  after(async () => app.close());

  const ask = { model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'A short tale' }], max_tokens: 20 };
  const env = () => ({
    REDIS_PREFIX: isolatedPrefix(),
    LOCAL_MODEL_TTFT_MS: '0',
    LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
    QUEUE_STALLED_INTERVAL_MS: '500',
    FAULT_BLOCK_WORKER_USER: 'block-me',
    WORKER_STALL_TIMEOUT_MS: '1000',
  });

  it('ends as failed with worker_stalled on the next take-over, and the next worker then answers normally', async () => {
    const e = env();
    const web = await start('web', e);
    const stalled = await start('worker', e);
    const sentAt = performance.now();
    const answer = post(`${web.url}/v1/chat/completions`, { ...ask, user: 'block-me' }, { bearer: account.apiKey });
    // Its watchdog ends it (SIGKILL: no exit code) once its event loop has not turned for 1 s.
    expect(await stalled.exited).to.equal(null);
    const endedMs = performance.now() - sentAt;
    expect(stalled.output()).to.include('marked the 1 job(s) it was running as stalled');
    // The next worker has the same failpoint: were the job run again, it would stall too.
    const next = await start('worker', e);
    const r = await answer;
    const failedMs = performance.now() - sentAt;
    expect(r.status).to.equal(502);
    expect(r.body.error.code).to.equal('worker_stalled');
    expect(r.body.error.message).to.match(/stalled on it and was stopped; it is not run again/);
    const rows = await usageRows(app, account.account.id);
    expect(rows).to.have.length(1);
    const [row] = rows;
    expect(row!.status).to.equal('failed');
    expect(row!.completion_tokens).to.equal(0);

    const fine = await post(`${web.url}/v1/chat/completions`, ask, { bearer: account.apiKey });
    expect(fine.status).to.equal(200);
    expect(fine.body.choices[0].finish_reason).to.equal('length');
    expect(next.proc.exitCode).to.equal(null);
    // Measured for the record: the stall bound plus the take-over's wait.
    expect(endedMs).to.be.below(10_000);
    expect(failedMs).to.be.below(30_000);
  });

  it('is answered afresh once after its worker dies, and ends as failed with worker_stalled when the worker answering it afresh dies too', async () => {
    const e = { ...env(), FAULT_INJECT: 'crash-before-record' };
    const web = await start('web', e);
    const first = await start('worker', e);
    const answer = post(`${web.url}/v1/chat/completions`, ask, { bearer: account.apiKey });
    expect(await first.exited).to.equal(null);
    // The take-over answers it afresh, and dies before recording too.
    const second = await start('worker', e);
    expect(await second.exited).to.equal(null);
    // The queue runs a job again once at most: the next worker finds it abandoned and ends it.
    await start('worker', { ...e, FAULT_INJECT: '' });
    const r = await answer;
    expect(r.status).to.equal(502);
    expect(r.body.error.code).to.equal('worker_stalled');
    expect(r.body.error.message).to.match(/stopped more than once/);
  });
});
