import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import type { Env } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { hashApiKey } from '../../src/accounts/api-keys.js';
import { closeOutboxFor } from '../support/accounts.js';
import { testConfig, testEnv } from '../support/env.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { PROJECT_ROOT } from '../support/project.js';

const SECTION = '## From sign-up to a first completion';
const MARKED_BLOCK = /<!-- readme-walkthrough\b[^>]*-->\n```bash\n([\s\S]*?)\n```\n/g;
const RUN_TIMEOUT_MS = 60_000;

/** The marked shell blocks of the README's walkthrough section, read from README.md as it is now. */
async function walkthroughScript(): Promise<string> {
  const readme = await readFile(path.join(PROJECT_ROOT, 'README.md'), 'utf8');
  const start = readme.indexOf(`\n${SECTION}\n`);
  if (start < 0) throw new Error(`README.md has no "${SECTION}" section`);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  const blocks = [...section.matchAll(MARKED_BLOCK)].map((m) => m[1]!);
  if (blocks.length === 0)
    throw new Error(`README.md's "${SECTION}" has no \`\`\`bash block marked <!-- readme-walkthrough -->`);
  return blocks.join('\n');
}

/** The service builds the emailed link from PUBLIC_BASE_URL, so it must know its port before it starts, as under `npm start`. */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

interface ScriptRun {
  code: number | null;
  timedOut: boolean;
  stdout: string;
  stderr: string;
  /** What the test's own exit trap wrote on fd 3. */
  probe: string;
}

let running: ChildProcess | undefined;

/** bash -euo pipefail in its own process group, killed whole (curl, npm, node) if it overruns. */
function runBash(script: string, env: Env, cwd: string, timeoutMs: number): Promise<ScriptRun> {
  const proc = spawn('bash', ['-euo', 'pipefail', '-c', script], {
    cwd,
    env,
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    detached: true,
  });
  running = proc;
  const out = { stdout: '', stderr: '', probe: '' };
  proc.stdout!.on('data', (d) => (out.stdout += d));
  proc.stderr!.on('data', (d) => (out.stderr += d));
  (proc.stdio[3] as NodeJS.ReadableStream).on('data', (d) => (out.probe += d));
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    killGroup(proc);
  }, timeoutMs);
  return new Promise((resolve) =>
    proc.once('close', (code) => {
      clearTimeout(timer);
      running = undefined;
      resolve({ code, timedOut, ...out });
    }),
  );
}

function killGroup(proc: ChildProcess): void {
  try {
    process.kill(-proc.pid!, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

describe('the README walkthrough "From sign-up to a first completion", run as written against a live web and worker', function () {
  this.timeout(RUN_TIMEOUT_MS + 60_000);
  let tmp: string;
  let mailDir: string;
  let app: AppContext;
  let web: RoleProcess | undefined;
  let worker: RoleProcess | undefined;
  let run: ScriptRun;
  let email = '';
  let finalKey = '';
  const projectMail = path.join(PROJECT_ROOT, 'var', 'mail');
  let projectMailBefore: string[] | undefined;

  const listing = async (dir: string) => (existsSync(dir) ? (await readdir(dir)).sort() : undefined);
  const diagnostics = () =>
    `exit ${run.code}${run.timedOut ? ` (killed after ${RUN_TIMEOUT_MS} ms)` : ''}\n--- stdout\n${run.stdout}\n--- stderr\n${run.stderr}\n` +
    `--- web\n${web?.output() ?? ''}\n--- worker\n${worker?.output() ?? ''}`;
  const stdoutLines = () => run.stdout.split('\n').filter((l) => l.trim() !== '');
  const jsonBodies = () =>
    stdoutLines()
      .filter((l) => l.startsWith('{'))
      .map((l) => {
        try {
          return JSON.parse(l);
        } catch {
          throw new Error(`the walkthrough printed a line that is not one JSON body:\n${l}\n${diagnostics()}`);
        }
      });

  before(async () => {
    projectMailBefore = await listing(projectMail);
    tmp = await mkdtemp(path.join(os.tmpdir(), 'readme-walkthrough-'));
    mailDir = path.join(tmp, 'mail');
    // A jq that refuses: the walkthrough promises to need nothing the project does not (node is there).
    const bin = path.join(tmp, 'bin');
    await mkdir(bin);
    await writeFile(
      path.join(bin, 'jq'),
      '#!/bin/sh\necho "jq: not installed (the walkthrough must not need it)" >&2\nexit 127\n',
    );
    await chmod(path.join(bin, 'jq'), 0o755);

    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const env: Env = {
      PORT: String(port),
      PUBLIC_BASE_URL: base,
      MAIL_TRANSPORT: 'dev-outbox',
      MAIL_DEV_DIR: mailDir,
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
    };
    app = createContext(testConfig(env), { role: 'test' });
    [web, worker] = await Promise.all([startRole('web', env), startRole('worker', env)]);

    // The README's lines, and a trap of the test's own that reports on fd 3 what they ended with,
    // even when a step fails (so the tests of the steps before it still say what worked).
    const script = `trap 'printf "%s\\n" "\${EMAIL:-}" "\${API_KEY:-}" >&3' EXIT\n${await walkthroughScript()}\n`;
    // `npm run mint-jwt` runs the built code from the project root with the service's environment.
    run = await runBash(
      script,
      testEnv({ ...env, BASE: base, PATH: `${bin}${path.delimiter}${process.env.PATH ?? ''}` }),
      PROJECT_ROOT,
      RUN_TIMEOUT_MS,
    );
    [email = '', finalKey = ''] = run.probe.split('\n');
  });

  after(async () => {
    if (running) killGroup(running);
    await Promise.all([web?.stop(), worker?.stop()]);
    if (app) {
      if (email) await closeOutboxFor(app, [email]);
      await app.close();
    }
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  it('runs to the end under bash -euo pipefail: every curl answered 2xx, and no jq was needed', () => {
    expect(run.timedOut, diagnostics()).to.equal(false);
    expect(run.code, diagnostics()).to.equal(0);
  });

  it('signs up an address the database did not know, and the answer names it', async () => {
    expect(email).to.match(/@/);
    expect(jsonBodies()[0]).to.include({ email });
    const accounts = await app.db.selectFrom('accounts').select('id').where('email', '=', email).execute();
    expect(accounts).to.have.length(1);
  });

  it("verifies with the link from this address's message in MAIL_DEV_DIR", async () => {
    const account = await app.db
      .selectFrom('accounts')
      .select('verified_at')
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    expect(account.verified_at).to.be.an.instanceOf(Date);
    const messages = await Promise.all(
      (await readdir(mailDir))
        .filter((f) => f.endsWith('.json'))
        .map(async (f) => JSON.parse(await readFile(path.join(mailDir, f), 'utf8'))),
    );
    expect(messages.filter((m) => m.to === email).map((m) => m.kind)).to.deep.equal(['verification']);
  });

  it('prints a chat.completion with an answer for the plain completion', () => {
    const completion = jsonBodies().find((b) => b.object === 'chat.completion');
    expect(completion, diagnostics()).to.not.equal(undefined);
    expect(completion.choices[0].message.content).to.be.a('string').that.is.not.empty;
  });

  it('prints a stream of chat.completion.chunk events ending in data: [DONE] for the streamed completion', () => {
    const events = stdoutLines()
      .filter((l) => l.startsWith('data: '))
      .map((l) => l.slice('data: '.length));
    expect(events.length, diagnostics()).to.be.greaterThan(1);
    expect(events.at(-1)).to.equal('[DONE]');
    for (const e of events.slice(0, -1)) expect(JSON.parse(e).object).to.equal('chat.completion.chunk');
  });

  it('ends holding the regenerated key, the one that answered subscription info and usage', async () => {
    const account = await app.db
      .selectFrom('accounts')
      .select('id')
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    const keys = await app.db
      .selectFrom('api_keys')
      .select(['key_hash', 'revoked_at'])
      .where('account_id', '=', account.id)
      .execute();
    expect(keys, 'the key from verification and the regenerated one').to.have.length(2);
    expect(keys.filter((k) => k.revoked_at === null).map((k) => k.key_hash)).to.deep.equal([hashApiKey(finalKey)]);
    const [info, usage] = jsonBodies().slice(-2);
    expect(info).to.include({ tier: 'free' }).and.to.have.property('models');
    expect(usage).to.include({ object: 'billing.usage', tier: 'free' });
  });

  it("leaves the project's var/mail as it was", async () => {
    expect(await listing(projectMail)).to.deep.equal(projectMailBefore);
  });
});
