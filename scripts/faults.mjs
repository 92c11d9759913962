// `npm run faults [scenario words]`: the fault suite (test/faults/run.ts). It brings its own
// Postgres and Redis (the machine's binaries, temporary directories, free ports), so it never
// touches the servers `npm start` and `npm test` use. Exit code 0 when every correctness target is
// met (the timing figures are reported: docs/faults.md).
import { spawn } from 'node:child_process';
import path from 'node:path';
import { OUT_DIR, ROOT, build, ensureDependencies, main } from './lib/setup.mjs';

await main(async () => {
  ensureDependencies();
  build();
  const child = spawn(
    process.execPath,
    ['--enable-source-maps', path.join(OUT_DIR, 'test', 'faults', 'run.js'), ...process.argv.slice(2)],
    { cwd: ROOT, stdio: 'inherit' },
  );
  const forward = (sig) => child.kill(sig);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  process.exit(await new Promise((resolve) => child.once('exit', (code, signal) => resolve(code ?? (signal ? 1 : 0)))));
});
