// `npm run bench`: the same "make sure" steps as `npm start` (on a database of its own), then the
// benchmark in bench/run.ts. Arguments pass through: `npm run bench -- --quick`.
// `npm run bench:invoicing` (this script with `invoicing` first): bench/invoicing.ts instead, on a
// database of its own that it empties; arguments pass through the same way. `npm run bench -- rollup`
// likewise runs bench/rollup.ts (the daily usage endpoint over a million ledger rows).
// First: .env is loaded before any other module reads the environment.
import './lib/env-file.mjs';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, symlinkSync } from 'node:fs';
import path from 'node:path';
import { OUT_DIR, ROOT, build, ensureDependencies, ensurePostgres, ensureRedis, main, migrate } from './lib/setup.mjs';

const BENCHES = {
  run: { entry: 'run.js', database: 'completions_bench' },
  invoicing: { entry: 'invoicing.js', database: 'completions_bench_invoicing' },
  rollup: { entry: 'rollup.js', database: 'completions_bench_rollup' },
};

/**
 * `--before REV` names a git revision (main, a commit): its build is checked out and built once into
 * var/bench/before/<commit> (a git worktree sharing this checkout's node_modules), and the benchmark
 * gets that build's output directory. A directory that already holds a build is passed as it is.
 */
function buildBefore(args) {
  const i = args.indexOf('--before');
  if (i < 0 || !args[i + 1] || existsSync(path.join(args[i + 1], 'src', 'http', 'server.js'))) return;
  const git = (...a) => {
    const r = spawnSync('git', a, { cwd: ROOT, encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`git ${a.join(' ')}: ${r.stderr}`);
    return r.stdout.trim();
  };
  const commit = git('rev-parse', '--verify', `${args[i + 1]}^{commit}`);
  const dir = path.join(ROOT, 'var', 'bench', 'before', commit.slice(0, 12));
  const out = path.join(dir, 'dist');
  if (!existsSync(path.join(out, 'src', 'http', 'server.js'))) {
    mkdirSync(path.dirname(dir), { recursive: true });
    if (!existsSync(dir)) git('worktree', 'add', '--detach', dir, commit);
    if (!existsSync(path.join(dir, 'node_modules')))
      symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
    process.stderr.write(
      `[setup] building ${args[i + 1]} (${commit.slice(0, 12)}) into ${path.relative(ROOT, out)}/\n`,
    );
    const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
    const r = spawnSync(process.execPath, [tsc, '-p', path.join(dir, 'tsconfig.json'), '--outDir', out], {
      cwd: dir,
      stdio: 'inherit',
    });
    if (r.status !== 0) throw new Error(`the build of ${args[i + 1]} failed`);
  }
  args[i + 1] = out;
}

await main(async () => {
  const args = process.argv.slice(2);
  const bench = args[0] === 'invoicing' || args[0] === 'rollup' ? BENCHES[args.shift()] : BENCHES.run;
  ensureDependencies();
  build();
  buildBefore(args);
  const postgres = await ensurePostgres(bench.database);
  const redis = await ensureRedis();
  const env = { ...process.env, DATABASE_URL: postgres.url, REDIS_URL: redis.url };
  await migrate(env);
  const child = spawn(process.execPath, [path.join(OUT_DIR, 'bench', bench.entry), ...args], {
    cwd: ROOT,
    env,
    stdio: 'inherit',
  });
  const code = await new Promise((resolve) => child.once('exit', (c) => resolve(c ?? 1)));
  await postgres.stop();
  await redis.stop();
  process.exit(code);
});
