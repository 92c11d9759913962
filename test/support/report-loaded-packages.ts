// Preloaded into a child process (NODE_OPTIONS=--import, see loaded-packages.ts) by tests that must
// know what it loaded: at exit it writes one line naming the OpenTelemetry packages in the module
// cache. The SDK's packages are CommonJS, so importing them, statically or not, puts them there.
import { createRequire } from 'node:module';

const cache = createRequire(import.meta.url).cache;
process.on('exit', () => {
  const names = new Set(
    Object.keys(cache).flatMap((file) => /node_modules\/(@opentelemetry\/[^/]+)\//.exec(file)?.[1] ?? []),
  );
  process.stderr.write(`loaded-opentelemetry-packages: ${JSON.stringify([...names].sort())}\n`);
});
