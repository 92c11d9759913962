// `npm run bench`: the same "make sure" steps as `npm start` (on a database of its own), then the
// benchmark in bench/run.ts. Arguments pass through: `npm run bench -- --quick`.
// `npm run bench:invoicing` (this script with `invoicing` first): bench/invoicing.ts instead, on a
// database of its own that it empties; arguments pass through the same way.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { OUT_DIR, ROOT, build, ensureDependencies, ensurePostgres, ensureRedis, main, migrate } from './lib/setup.mjs';

const BENCHES = {
  run: { entry: 'run.js', database: 'completions_bench' },
  invoicing: { entry: 'invoicing.js', database: 'completions_bench_invoicing' },
};

await main(async () => {
  const args = process.argv.slice(2);
  const bench = args[0] === 'invoicing' ? BENCHES[args.shift()] : BENCHES.run;
  ensureDependencies();
  build();
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
