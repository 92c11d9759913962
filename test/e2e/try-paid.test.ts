import { spawn } from 'node:child_process';
import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { testConfig, testEnv } from '../support/env.js';
import { PROJECT_ROOT } from '../support/project.js';

const RUN_TIMEOUT_MS = 90_000;

/** `npm run try-paid` as a newcomer runs it, in its own process group (killed whole if it overruns). */
function runTryPaid(): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn('npm', ['run', '--silent', 'try-paid'], {
    cwd: PROJECT_ROOT,
    env: testEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  const timer = setTimeout(() => process.kill(-proc.pid!, 'SIGKILL'), RUN_TIMEOUT_MS);
  return new Promise((resolve) =>
    proc.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

describe('npm run try-paid: the paid path offline, against the fake Stripe', function () {
  this.timeout(RUN_TIMEOUT_MS + 30_000);
  let app: AppContext;
  before(() => {
    app = createContext(testConfig(), { role: 'test' });
  });
  after(async () => app?.close());

  it('signs up, upgrades through checkout, runs a paid completion and is invoiced, then exits 0', async () => {
    const run = await runTryPaid();
    const diagnostics = `exit ${run.code}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}`;
    expect(run.code, diagnostics).to.equal(0);
    const email = /The paid path worked: (\S+) is paid/.exec(run.stdout)?.[1];
    expect(email, diagnostics).to.be.a('string');
    const account = await app.db
      .selectFrom('accounts')
      .select(['id', 'tier', 'verified_at'])
      .where('email', '=', email!)
      .executeTakeFirstOrThrow();
    expect(account.tier).to.equal('paid');
    expect(account.verified_at).to.be.an.instanceOf(Date);
    const invoices = await app.db
      .selectFrom('invoices')
      .select(['kind', 'amount_cents'])
      .where('account_id', '=', account.id)
      .execute();
    expect(invoices).to.have.length(1);
    expect(Number(invoices[0]!.amount_cents)).to.be.greaterThan(0);
  });
});
