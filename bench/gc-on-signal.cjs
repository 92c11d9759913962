// Loaded with `node --expose-gc --require` into the web process the benchmark holds idle streams
// on: SIGUSR2 runs a full garbage collection and says so on stderr, so the memory read before,
// during and after the streams is what is live, not what the collector has not got round to.
'use strict';
let collections = 0;
process.on('SIGUSR2', () => {
  globalThis.gc?.();
  process.stderr.write(`gc-on-signal: collected ${++collections}\n`);
});
