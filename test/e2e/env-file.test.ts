import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { authenticateJwt } from '../../src/accounts/auth.service.js';
import { createTestAccount } from '../support/accounts.js';
import { testConfig, testEnv } from '../support/env.js';
import { PROJECT_ROOT } from '../support/project.js';

// `.env` for npm start, npm test, npm run bench and the scripts (scripts/lib/env-file.mjs): loaded
// with Node's own loader when it exists, variables already set winning, said in one line. Each case
// runs in a directory of its own holding its .env, never the checkout's.

const LOADER = path.join(PROJECT_ROOT, 'scripts', 'lib', 'env-file.mjs');

function run(
  cwd: string,
  command: string,
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const proc = spawn('sh', ['-c', command], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  proc.stdout.on('data', (d) => (stdout += d));
  proc.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => proc.once('close', (code) => resolve({ code, stdout, stderr })));
}

describe('.env for npm start, npm test and the scripts', () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'env-file-'));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  const printEnv = `"${process.execPath}" --import "${LOADER}" -e "console.log(JSON.stringify({ A: process.env.A, B: process.env.B, C: process.env.C }))"`;

  it('loads .env with Node’s loader, keeps what the environment already sets, and says so in one line', async () => {
    writeFileSync(path.join(dir, '.env'), '# local settings\nA=from-file\nB="from file"\nexport C=3\n');
    const r = await run(dir, printEnv, { ...process.env, B: 'from-shell', A: undefined, C: undefined });
    expect(r.code, r.stderr).to.equal(0);
    expect(JSON.parse(r.stdout)).to.deep.equal({ A: 'from-file', B: 'from-shell', C: '3' });
    expect(r.stderr).to.equal('[env] loaded .env: A, C; already set in the environment, so kept: B\n');
  });

  it('does nothing, and says nothing, without a .env', async () => {
    const r = await run(dir, printEnv, { ...process.env, A: undefined, B: 'from-shell', C: undefined });
    expect(r.code).to.equal(0);
    expect(JSON.parse(r.stdout)).to.deep.equal({ B: 'from-shell' });
    expect(r.stderr).to.equal('');
  });

  it('is what the built scripts run with: mint-jwt signs with the JWT_SECRET and reads the DATABASE_URL of .env', async () => {
    const secret = 'env-file-test-secret-0123456789-abcdefgh';
    const app: AppContext = createContext(testConfig({ JWT_SECRET: secret }), { role: 'test' });
    try {
      const { account } = await createTestAccount(app);
      writeFileSync(path.join(dir, '.env'), `DATABASE_URL=${process.env.DATABASE_URL}\nJWT_SECRET=${secret}\n`);
      // The package.json command as npm runs it, from a directory laid out like the checkout.
      for (const part of ['scripts', 'dist']) symlinkSync(path.join(PROJECT_ROOT, part), path.join(dir, part));
      const command = (
        JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as {
          scripts: Record<string, string>;
        }
      ).scripts;
      for (const name of ['migrate', 'mint-jwt', 'run-job'])
        expect(command[name], name).to.match(/^node --import \.\/scripts\/lib\/env-file\.mjs dist\/scripts\//);
      const env = testEnv({ DATABASE_URL: undefined, JWT_SECRET: undefined, PATH: process.env.PATH });
      const r = await run(dir, `${command['mint-jwt']} ${account.email}`, env);
      expect(r.code, r.stderr).to.equal(0);
      expect(r.stderr).to.equal('[env] loaded .env: DATABASE_URL, JWT_SECRET\n');
      expect((await authenticateJwt(app, r.stdout.trim())).id).to.equal(account.id);
    } finally {
      await app.close();
    }
  });

  it('is the first module npm start, npm test and npm run bench load, before anything reads the environment', () => {
    for (const script of ['start.mjs', 'test.mjs', 'bench.mjs']) {
      const source = readFileSync(path.join(PROJECT_ROOT, 'scripts', script), 'utf8');
      const firstImport = /^import [^\n]*$/m.exec(source)?.[0];
      expect(firstImport, script).to.equal("import './lib/env-file.mjs';");
    }
  });
});
