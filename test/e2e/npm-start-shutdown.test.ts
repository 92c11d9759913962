import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix, OPERATOR_TOKEN, testConfig, testEnv } from '../support/env.js';
import { eventually, get } from '../support/http.js';
import { childrenOf, NpmStart, running } from '../support/npm-start.js';

// npm start's supervisor always ends: one Ctrl-C stops every role, escalating to SIGKILL for one
// that does not stop (a worker whose event loop is blocked); a second Ctrl-C kills at once; and
// roles whose supervisor is gone, however it died, exit by themselves.

const ANNOUNCED = /Service running at (http:\/\/\S+)/;
const BLOCK = 'block-my-worker';

describe('npm start stopping, with a worker whose event loop is blocked', function () {
  this.timeout(120_000);
  let app: AppContext;
  let account: TestAccount;
  let started: NpmStart | undefined;
  let roles: number[] = [];

  before(async () => {
    app = createContext(testConfig(), { role: 'test' });
    account = await createTestAccount(app, { tier: 'paid' });
  });
  afterEach(async () => {
    for (const pid of roles) if (running(pid)) process.kill(pid, 'SIGKILL');
    if (started && started.proc.exitCode === null && started.proc.signalCode === null) {
      process.kill(-started.proc.pid!, 'SIGKILL');
      await started.exited;
    }
    started = undefined;
    roles = [];
  });
  after(async () => app.close());

  /** npm start with its three roles up, and its worker blocked by a request. */
  async function startBlocked(env: Record<string, string>): Promise<NpmStart> {
    started = new NpmStart(
      testEnv({
        LOG_LEVEL: 'warn',
        REDIS_PREFIX: isolatedPrefix(),
        FAULT_BLOCK_WORKER_USER: BLOCK,
        // The stall watchdog would end the worker by itself: these tests are about the supervisor.
        WORKER_STALL_TIMEOUT_MS: '0',
        ADMIN_TOKEN: OPERATOR_TOKEN,
        ...env,
      }),
    );
    expect(await started.until(ANNOUNCED), started.stderr).to.equal(true);
    const base = ANNOUNCED.exec(started.stdout)![1]!;
    roles = childrenOf(started.proc.pid!);
    expect(roles).to.have.length(3);
    void fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.apiKey}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'hi' }], user: BLOCK }),
      signal: AbortSignal.timeout(60_000),
    }).catch(() => undefined);
    // Its registry entry lapses once its event loop stops: then it is blocked for good.
    await eventually(
      async () =>
        (await get(`${base}/health`, { bearer: OPERATOR_TOKEN })).body.checks.workers.live === 0 ? true : undefined,
      'the worker to block',
    );
    return started;
  }

  /** Resolves with the ms from `since` until npm start and every role it started have ended. */
  async function allEnded(npm: NpmStart, since: number, timeoutMs: number): Promise<number> {
    await eventually(
      async () => (npm.proc.exitCode !== null && roles.every((pid) => !running(pid)) ? true : undefined),
      'npm start and its roles to end',
      timeoutMs,
      20,
    );
    return performance.now() - since;
  }

  it('ends every process within SHUTDOWN_TIMEOUT_MS + 5 s of one Ctrl-C, killing the blocked worker', async () => {
    const npm = await startBlocked({ SHUTDOWN_TIMEOUT_MS: '2000' });
    const at = performance.now();
    // What a terminal does on Ctrl-C: SIGINT to the foreground group (npm start's; each role has its own).
    process.kill(-npm.proc.pid!, 'SIGINT');
    const tookMs = await allEnded(npm, at, 2000 + 5000);
    expect(tookMs).to.be.below(2000 + 5000);
    expect(npm.stderr).to.match(/worker still running 5000 ms after SIGTERM: killing/);
    expect(npm.proc.exitCode).to.equal(0);
  });

  it('kills every role at once on a second Ctrl-C', async () => {
    const npm = await startBlocked({ SHUTDOWN_TIMEOUT_MS: '30000' });
    process.kill(-npm.proc.pid!, 'SIGINT');
    expect(await npm.until(/stopping web, worker and scheduler/)).to.equal(true);
    const at = performance.now();
    process.kill(-npm.proc.pid!, 'SIGINT');
    const tookMs = await allEnded(npm, at, 3000);
    expect(tookMs).to.be.below(3000);
    expect(npm.stderr).to.include('second signal: killing web, worker and scheduler now');
  });

  it('leaves no role running 5 s after npm start alone is killed with SIGKILL', async () => {
    const npm = await startBlocked({});
    const at = performance.now();
    process.kill(npm.proc.pid!, 'SIGKILL');
    await npm.exited;
    await eventually(
      async () => (roles.every((pid) => !running(pid)) ? true : undefined),
      'every role to end',
      5000,
      20,
    );
    expect(performance.now() - at).to.be.below(5000);
  });
});
