// `npm run bench:invoicing`: the same "make sure" steps as `npm start` (on a database of its own,
// emptied by the benchmark), then bench/invoicing.ts. Arguments pass through:
// `npm run bench:invoicing -- --accounts 1000`.
import { spawn } from 'node:child_process';
import path from 'node:path';
import { OUT_DIR, ROOT, build, ensureDependencies, ensurePostgres, ensureRedis, main, migrate } from './lib/setup.mjs';

await main(async () => {
  ensureDependencies();
  build();
  const postgres = await ensurePostgres('completions_bench_invoicing');
  const redis = await ensureRedis();
  const env = { ...process.env, DATABASE_URL: postgres.url, REDIS_URL: redis.url };
  await migrate(env);
  const child = spawn(process.execPath, [path.join(OUT_DIR, 'bench', 'invoicing.js'), ...process.argv.slice(2)], { cwd: ROOT, env, stdio: 'inherit' });
  const code = await new Promise((resolve) => child.once('exit', (c) => resolve(c ?? 1)));
  await postgres.stop();
  await redis.stop();
  process.exit(code);
});
