// `npm run bench`: the fake upstream, the service (one web and one worker process) pointed at it,
// and a load generator, measured side by side in one run: direct-to-upstream against
// through-the-service, streaming and not, at several concurrencies, interleaved in rounds so
// drift on a shared machine hits both sides alike. A bare pass-through proxy (pass-through.ts)
// shows the least any extra Node hop adds on the same machine in the same run, and a second copy
// of the service with two worker processes behind one web process shows how it scales with workers.
// The Responses API's modes (POST /v1/responses) run on the service's sides beside chat's, in the
// same rounds, so what the Responses framing and its stored answer cost per request shows against
// the same chat request.
// Then the Redis memory each request leaves behind, and the web process's memory with 2,000 open
// idle streams. Prints Markdown tables (for docs/benchmark.md) and writes var/bench/results.json.
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism as cpuCount, setPriority } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Redis } from 'ioredis';
import { loadConfig } from '../src/config.js';
import { createContext } from '../src/context.js';
import { generateApiKey } from '../src/accounts/api-keys.js';
import { loadCatalog } from '../src/catalog/catalog.js';
import { holdStreams, percentile, runLoad, runOpenLoop, type LoadResult } from './loadgen.js';
import { prng as seededRandom } from '../src/providers/local/local-answer.js';
import { PORTKEY_VERSION, startPortkey } from './peers.js';
import { createServer } from 'node:net';
import { usageStreamKeys } from '../src/usage/usage-stream.js';
import { add, diff, machineBusyMs, postgresPidsFor, snapshot, type CpuSnapshot } from './cpu.js';
import { measureRequestKeys, steadyStateBytes, type RequestKeyFigures } from './redis-memory.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const dist = path.resolve(here, '..');
const root = path.resolve(dist, '..');

const { values: a } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,32,256' },
    // Comma-separated, from MODE_SPECS below: e.g. `--modes stream,responses-stream` to set the two against each other alone.
    modes: { type: 'string', default: 'stream,json,responses-stream' },
    tokens: { type: 'string', default: '32' },
    'itl-ms': { type: 'string', default: '1' },
    rounds: { type: 'string', default: '2' },
    streams: { type: 'string', default: '10000' },
    // Open-loop rows: Poisson arrivals at each rate (streams per second) for open-seconds, per side and round.
    rates: { type: 'string', default: '100,300' },
    'open-seconds': { type: 'string', default: '10' },
    quick: { type: 'boolean', default: false },
    // Writes V8 CPU profiles of the web and worker processes to var/bench/profiles (open in Chrome DevTools).
    'cpu-prof': { type: 'boolean', default: false },
    // Leaves the load generator and the upstream at the sides' priority (by default they run above it, as root).
    'same-priority': { type: 'boolean', default: false },
    // Adds a side: a third copy of the service (one web, one worker) with OpenTelemetry tracing on,
    // every trace kept, exported over OTLP/HTTP to the fake upstream (which drops them).
    tracing: { type: 'boolean', default: false },
    // Adds a side: another build of the service (its OUT_DIR, e.g. a build of main), one web and one
    // worker on a Redis prefix of their own, so a change is measured against what it changes in the
    // same run. `npm run bench -- --before main` builds that revision itself (scripts/bench.mjs).
    before: { type: 'string', default: '' },
    // Which sides to run (direct, the baseline, always runs): e.g. `--sides service,before` for a
    // short before/after run of one change.
    sides: { type: 'string', default: '' },
    // Gives the benchmark's API key limits of its own (requests per minute and a monthly spending
    // limit, both far out of the way), so admission does all of a key's work: the per-key figures.
    'key-limits': { type: 'boolean', default: false },
  },
});
const concurrencies = a.concurrency.split(',').filter(Boolean).map(Number);
// A mode is a wire format and whether it streams. The Responses API's (POST /v1/responses, the
// same completion job as chat's) run only on the service's sides: the upstream, the pass-through
// and Portkey are measured on chat completions alone. `store` is the Responses field: true by
// default, as at OpenAI, so each answer is also written to Postgres (stored_responses).
const MODE_SPECS = {
  stream: { api: 'chat', stream: true, store: false },
  json: { api: 'chat', stream: false, store: false },
  'responses-stream': { api: 'responses', stream: true, store: true },
  responses: { api: 'responses', stream: false, store: true },
  'responses-stream-nostore': { api: 'responses', stream: true, store: false },
  'responses-nostore': { api: 'responses', stream: false, store: false },
} as const;
type Mode = keyof typeof MODE_SPECS;
const modes = a.modes.split(',').map((m) => {
  if (!Object.hasOwn(MODE_SPECS, m))
    throw new Error(`--modes takes ${Object.keys(MODE_SPECS).join(', ')} (comma-separated), not ${m}`);
  return m as Mode;
});
const isChat = (m: Mode) => MODE_SPECS[m].api === 'chat';
/** The chat mode a Responses mode is set against: chat completions, streamed alike. */
const chatModeOf = (m: Mode): Mode => (MODE_SPECS[m].stream ? 'stream' : 'json');
const rounds = Number(a.rounds);
const requestsFor = (c: number) => (a.quick ? Math.max(20, c * 2) : c === 1 ? 150 : Math.min(3000, c * 40));

const WARMUP_REQUESTS = 200;

const exited = (c: ChildProcess) =>
  new Promise((r) => (c.exitCode !== null || c.signalCode !== null ? r(null) : c.once('exit', r)));

async function countUsage(ctx: ReturnType<typeof createContext>, accountId: string): Promise<number> {
  const row = await ctx.db
    .selectFrom('usage_events')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('account_id', '=', accountId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

// The processes the benchmark has stopped itself (any other exit of a side's process is news).
const stopped = new Set<number | undefined>();
const stop = (child: ChildProcess) => {
  stopped.add(child.pid);
  child.kill('SIGTERM');
};

function startProcess(
  entry: string,
  env: NodeJS.ProcessEnv,
  ready: RegExp,
  nodeArgs: string[] = [],
): Promise<{ child: ChildProcess; match: RegExpExecArray }> {
  const profile = a['cpu-prof'] ? ['--cpu-prof', '--cpu-prof-dir', path.join(root, 'var', 'bench', 'profiles')] : [];
  const child = spawn(process.execPath, [...profile, ...nodeArgs, entry], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = ready.exec(out);
      if (m) resolve({ child, match: m });
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.once('exit', (code, signal) => {
      reject(new Error(`${entry} exited with ${code}:\n${out}`));
      // A side's process that dies mid-run (killed from outside, or crashed) would leave its
      // requests to time out one by one: say so at once.
      if (!stopped.has(child.pid))
        process.stderr.write(
          `bench: ${entry} (pid ${child.pid}) exited with ${code ?? signal}:\n${out.slice(-2000)}\n`,
        );
    });
  });
}

// 'two workers' is a second copy of the service (its own web process and Redis prefix, the same
// configuration) with two worker processes: the same load against one worker and against two.
// 'before' is another build of the service (--before), measured in the same rounds as this one.
const ALL_SIDES = ['direct', 'service', 'two workers', 'pass-through', 'portkey', 'traced', 'before'] as const;
type Side = (typeof ALL_SIDES)[number];
const chosen = a.sides === '' ? undefined : new Set(['direct', ...a.sides.split(',')]);
for (const s of chosen ?? []) if (!(ALL_SIDES as readonly string[]).includes(s)) throw new Error(`no side named ${s}`);
const SIDES: Side[] = ALL_SIDES.filter(
  (s) => (s !== 'traced' || a.tracing) && (s !== 'before' || a.before !== '') && (!chosen || chosen.has(s)),
);
const has = (s: Side) => SIDES.includes(s);
// The sides a Responses mode runs on: the one-worker copies of the service.
const RESPONSES_SIDES: Side[] = ['service', 'traced', 'before'];
const sidesFor = (m: Mode): Side[] => (isChat(m) ? SIDES : SIDES.filter((s) => RESPONSES_SIDES.includes(s)));
// The open-loop rows compare the service with the reference gateway (and the build before, when
// given); direct is the baseline the added latencies are taken from, and the pass-through the floor.
const OPEN_ALL = ['direct', 'service', 'before', 'portkey', 'pass-through'] as const;
type OpenSide = (typeof OPEN_ALL)[number];
const OPEN_SIDES: OpenSide[] = OPEN_ALL.filter((s) => has(s));

interface Row {
  mode: Mode;
  concurrency: number;
  results: Record<Side, LoadResult[]>;
  cpu: Record<Side, CpuSnapshot>;
  /** The whole machine's busy CPU ms during each side's runs, every process included. */
  machineMs: Record<Side, number>;
}

const CPU_ROLES = ['web', 'worker', 'redis', 'postgres', 'upstream', 'load generator'] as const;
// Each copy of the service's own processes in the CPU figures: its web and worker, Redis and Postgres.
const OWN_ROLES: Partial<Record<Side, string[]>> = {
  service: ['web', 'worker', 'redis', 'postgres'],
  traced: ['web traced', 'worker traced', 'redis', 'postgres'],
  before: ['web before', 'worker before', 'redis', 'postgres'],
};

/** CPU ms per request of a copy of the service's own processes (OWN_ROLES) during its runs of a row. */
function ownCpuPerRequest(row: Row, side: Side): number {
  const n = row.results[side].reduce((s, r) => s + r.samples.length, 0);
  return (OWN_ROLES[side] ?? []).reduce((t, r) => t + (row.cpu[side][r] ?? 0), 0) / Math.max(1, n);
}
const TWO_WORKER_ROLES = ['web 2w', 'worker 2w.1', 'worker 2w.2'] as const;
const TRACED_ROLES = ['web traced', 'worker traced'] as const;
const MEMORY_SAMPLE_REQUESTS = 300;

const fmt = (n: number) => (Number.isFinite(n) ? n.toFixed(1) : 'n/a');
const fmt2 = (n: number) => (Number.isFinite(n) ? n.toFixed(2) : 'n/a');

function summarise(results: LoadResult[]) {
  const samples = results.flatMap((r) => r.samples);
  const wall = results.reduce((s, r) => s + r.wallMs, 0);
  const errors = results.reduce((s, r) => s + Object.values(r.errors).reduce((x, y) => x + y, 0), 0);
  return {
    ttft50: percentile(
      samples.map((s) => s.ttftMs),
      50,
    ),
    ttft99: percentile(
      samples.map((s) => s.ttftMs),
      99,
    ),
    ttft999: percentile(
      samples.map((s) => s.ttftMs),
      99.9,
    ),
    total50: percentile(
      samples.map((s) => s.totalMs),
      50,
    ),
    total99: percentile(
      samples.map((s) => s.totalMs),
      99,
    ),
    rps: (samples.length / wall) * 1000,
    errors,
    n: samples.length,
    wallMs: wall,
  };
}

/** The errors of some runs by message, for the progress lines. */
const errorKinds = (results: LoadResult[]) => {
  const kinds: Record<string, number> = {};
  for (const r of results) for (const [k, n] of Object.entries(r.errors)) kinds[k] = (kinds[k] ?? 0) + n;
  return Object.entries(kinds)
    .map(([k, n]) => `${k} ×${n}`)
    .join(', ');
};

const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => resolve(port));
    });
  });

/** One process's Prometheus metric value (the first sample of `name`), from its /metrics. */
async function metricValue(baseUrl: string, name: string): Promise<number> {
  const text = await (await fetch(`${baseUrl}/metrics`, { headers: { accept: 'text/plain' } })).text();
  const m = new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(text);
  return m ? Number(m[1]) : NaN;
}

const wallOf = (results: LoadResult[]) => results.reduce((s, r) => s + r.wallMs, 0);
const MiB = (bytes: number) => bytes / (1024 * 1024);

async function main(): Promise<void> {
  const prefix = `bench_${Date.now().toString(36)}`;
  const upstream = fork(
    path.join(here, 'fake-upstream.js'),
    ['--tokens', a.tokens, '--ttft-ms', '0', '--itl-ms', a['itl-ms']],
    { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] },
  );
  const upstreamPort = await new Promise<number>((resolve) =>
    upstream.once('message', (m: { port: number }) => resolve(m.port)),
  );
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}/v1`;
  const proxy = fork(path.join(here, 'pass-through.js'), ['--upstream', `http://127.0.0.1:${upstreamPort}`], {
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const proxyPort = await new Promise<number>((resolve) =>
    proxy.once('message', (m: { port: number }) => resolve(m.port)),
  );
  const portkey = await startPortkey(root, upstreamUrl, await freePort());

  const env: NodeJS.ProcessEnv = {
    ...process.env,
    NODE_ENV: 'development',
    PORT: '0',
    LOG_LEVEL: 'warn',
    REDIS_PREFIX: prefix,
    MODEL_BACKEND: 'catalog',
    OPENAI_API_KEY: 'sk-bench-upstream',
    OPENAI_BASE_URL: upstreamUrl,
    WORKER_CONCURRENCY: String(Math.max(2500, Number(a.streams) + 200)),
    QUEUE_MAX_DEPTH: '100000',
    STREAM_HEARTBEAT_MS: '1000',
    PAID_REQUESTS_PER_MINUTE: '10000000',
    PAID_REQUESTS_PER_HOUR: '100000000',
    PAID_REQUESTS_PER_DAY: '1000000000',
    PAID_TOKENS_PER_DAY: '1000000000000',
  };
  const config = loadConfig(env);
  const catalog = loadCatalog(path.resolve(root, config.catalog.modelsFile));
  const model = catalog.models.find((m) => m.provider === 'openai');
  if (!model) throw new Error('the catalog has no OpenAI model to benchmark');

  const ctx = createContext(config, { role: 'bench' });
  const key = generateApiKey();
  const account = await ctx.db
    .insertInto('accounts')
    .values({
      name: 'Benchmark',
      email: `bench+${prefix}@example.com`,
      organization: 'bench',
      tier: 'paid',
      verified_at: new Date(),
    })
    .returning('id')
    .executeTakeFirstOrThrow();
  await ctx.db
    .insertInto('api_keys')
    .values({
      account_id: account.id,
      key_hash: key.hash,
      display_prefix: key.displayPrefix,
      ...(a['key-limits'] ? { requests_per_minute: 10_000_000, monthly_spend_limit_usd: '100000.00' } : {}),
    })
    .execute();

  type Started = Awaited<ReturnType<typeof startProcess>>;
  /** One copy of the service: a web process and `workers` worker processes from the build in `dir`. */
  const startCopy = async (copyEnv: NodeJS.ProcessEnv, workers: number, dir = dist) => {
    const web = await startProcess(
      path.join(dir, 'src/http/server.js'),
      { ...copyEnv, LOG_LEVEL: 'info' },
      /listening on (http:\/\/[^\s"]+)/,
    );
    const ws: Started[] = [];
    for (let i = 0; i < workers; i++)
      ws.push(
        await startProcess(path.join(dir, 'workers/worker.js'), { ...copyEnv, LOG_LEVEL: 'info' }, /worker: running/),
      );
    return { web, workers: ws, base: web.match[1]!, url: `${web.match[1]}/v1/chat/completions` };
  };
  const {
    web,
    workers: [worker],
  } = await startCopy(env, 1);
  if (!worker) throw new Error('the service has no worker');
  // The two-worker copy: one web process and two workers on a Redis prefix of their own (so a
  // queue of their own), under the benchmark's prefix so the clean-up below removes it too.
  const env2: NodeJS.ProcessEnv = { ...env, REDIS_PREFIX: `${prefix}w2` };
  const config2 = loadConfig(env2);
  const two = has('two workers') ? await startCopy(env2, 2) : undefined;
  // The traced copy: tracing on, every trace kept, exported to the fake upstream's OTLP sink.
  const envTraced: NodeJS.ProcessEnv = {
    ...env,
    REDIS_PREFIX: `${prefix}tr`,
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${upstreamPort}`,
    OTEL_TRACES_SAMPLER: process.env.OTEL_TRACES_SAMPLER ?? 'always_on',
  };
  const traced = has('traced') ? await startCopy(envTraced, 1) : undefined;
  // The build before a change, on a prefix of its own, against the same database and upstream.
  const envBefore: NodeJS.ProcessEnv = { ...env, REDIS_PREFIX: `${prefix}bf` };
  const before = has('before') ? await startCopy(envBefore, 1, path.resolve(a.before)) : undefined;
  const copies = [two, traced, before].filter((c) => c !== undefined);
  const directUrl = `${upstreamUrl}/chat/completions`;
  const messages = [{ role: 'user', content: 'Benchmark prompt: say something.' }];
  const directBody = { model: model.upstream_model, messages, stream_options: { include_usage: true } };
  const serviceBody = { model: model.id, messages };
  const nowhere = 'http://127.0.0.1:9/v1/chat/completions';
  const targets: Record<
    Side,
    { url: string; apiKey: string; body: Record<string, unknown>; headers?: Record<string, string> }
  > = {
    direct: { url: directUrl, apiKey: 'sk-bench-upstream', body: directBody },
    service: { url: `${web.match[1]}/v1/chat/completions`, apiKey: key.key, body: serviceBody },
    'two workers': { url: two?.url ?? nowhere, apiKey: key.key, body: serviceBody },
    traced: { url: traced?.url ?? nowhere, apiKey: key.key, body: serviceBody },
    before: { url: before?.url ?? nowhere, apiKey: key.key, body: serviceBody },
    'pass-through': {
      url: `http://127.0.0.1:${proxyPort}/v1/chat/completions`,
      apiKey: 'sk-bench-upstream',
      body: directBody,
    },
    portkey: {
      url: `${portkey.url}/v1/chat/completions`,
      apiKey: 'sk-bench-upstream',
      body: directBody,
      headers: portkey.headers,
    },
  };
  // The Responses API on the service's sides: the chat rows' one user message as its `input` string.
  const responsesBase: Partial<Record<Side, string>> = {
    service: web.match[1]!,
    traced: traced?.base,
    before: before?.base,
  };
  const responsesBody = { model: model.id, input: messages[0]!.content };
  /** What a side's load of one mode sends, and where. */
  const target = (side: Side, mode: Mode) => {
    const m = MODE_SPECS[mode];
    if (m.api === 'chat') return { ...targets[side], stream: m.stream };
    const base = responsesBase[side];
    if (base === undefined) throw new Error(`the ${side} side does not serve the Responses API`);
    return {
      url: `${base}/v1/responses`,
      apiKey: key.key,
      body: m.store ? responsesBody : { ...responsesBody, store: false },
      api: 'responses' as const,
      stream: m.stream,
    };
  };
  const pidsOf = (c: { web: Started; workers: Started[] } | undefined) =>
    c ? [c.web, ...c.workers].map((p) => p.child.pid!) : [];
  // Each side's own processes. While one side is measured every other side's are stopped
  // (SIGSTOP): an idle copy of the service still polls Redis and Postgres (queue fetches, stalled
  // checks, liveness keys, the usage stream and the email outbox), which took CPU from the side
  // measured and counted as its Redis and Postgres time.
  const sideProcesses: Record<Side, number[]> = {
    direct: [],
    service: pidsOf({ web, workers: [worker] }),
    'two workers': pidsOf(two),
    traced: pidsOf(traced),
    before: pidsOf(before),
    'pass-through': [proxy.pid!],
    portkey: [portkey.child.pid!],
  };
  const signal = (pids: number[], sig: NodeJS.Signals) => {
    for (const pid of pids) {
      try {
        process.kill(pid, sig);
      } catch {
        // already gone
      }
    }
  };
  let running: Side | 'all' = 'all';
  const isolate = (side: Side | 'all') => {
    if (running === side) return;
    for (const s of ALL_SIDES) if (side !== 'all' && s !== side) signal(sideProcesses[s], 'SIGSTOP');
    signal(side === 'all' ? Object.values(sideProcesses).flat() : sideProcesses[side], 'SIGCONT');
    running = side;
  };
  // The upstream and the load generator run at a higher priority than the sides, so that neither
  // is starved by the side it measures (which would count as that side's latency, or hide it).
  if (!a['same-priority'])
    for (const pid of [process.pid, upstream.pid!]) {
      try {
        setPriority(pid, -5);
      } catch {
        process.stderr.write('bench: could not raise the priority of the load generator and upstream (not root)\n');
      }
    }
  // Requests sent through any copy of the service, warm-ups included: the ledger must hold as many.
  let sentThroughService = 0;
  const SERVICE_SIDES: Side[] = ['service', 'two workers', 'traced', 'before'];
  const served = (r: LoadResult) => r.samples.length + Object.values(r.errors).reduce((x, y) => x + y, 0);
  const count = <T extends LoadResult>(side: Side, r: T): T => {
    if (SERVICE_SIDES.includes(side)) sentThroughService += served(r);
    return r;
  };
  const load = async (side: Side, mode: Mode, spec: { concurrency: number; requests: number }) =>
    count(side, await runLoad({ ...target(side, mode), ...spec }));
  // After a side is resumed: its timers catch up and its JIT, pools and script caches warm again.
  const warm = (side: Side, mode: Mode, concurrency: number) =>
    load(side, mode, {
      concurrency: Math.min(concurrency, 32),
      requests: Math.min(200, Math.max(50, concurrency * 4)),
    });

  try {
    process.stderr.write(
      `bench: upstream ${upstreamUrl}, sides ${SIDES.join(', ')}; service ${web.match[1]} (web pid ${web.child.pid}, worker pid ${worker.child.pid})` +
        `${before ? `, before ${before.web.match[1]} from ${a.before}` : ''}, model ${model.id}\n`,
    );
    // Warm every path (JIT, connection pools, script cache), each side alone.
    for (const side of SIDES) {
      isolate(side);
      for (const mode of new Set<Mode>(['stream', 'json', ...modes]))
        if (sidesFor(mode).includes(side))
          await load(side, mode, { concurrency: 8, requests: side === 'direct' ? 100 : WARMUP_REQUESTS });
    }
    const redisPid = Number(/process_id:(\d+)/.exec(await ctx.redis.info('server'))?.[1]);
    const roles: Record<
      | (typeof CPU_ROLES)[number]
      | (typeof TWO_WORKER_ROLES)[number]
      | (typeof TRACED_ROLES)[number]
      | 'web before'
      | 'worker before'
      | 'pass-through'
      | 'portkey',
      () => number[]
    > = {
      web: () => [web.child.pid!],
      worker: () => [worker.child.pid!],
      'web 2w': () => (two ? [two.web.child.pid!] : []),
      'worker 2w.1': () => (two ? [two.workers[0]!.child.pid!] : []),
      'worker 2w.2': () => (two ? [two.workers[1]!.child.pid!] : []),
      'web traced': () => (traced ? [traced.web.child.pid!] : []),
      'worker traced': () => (traced ? [traced.workers[0]!.child.pid!] : []),
      'web before': () => (before ? [before.web.child.pid!] : []),
      'worker before': () => (before ? [before.workers[0]!.child.pid!] : []),
      redis: () => (redisPid ? [redisPid] : []),
      // Postgres may serve other databases on this machine: only our database's backends and the server's own processes count.
      postgres: () => postgresPidsFor(decodeURIComponent(new URL(config.db.url).pathname.slice(1))),
      upstream: () => [upstream.pid!],
      'pass-through': () => [proxy.pid!],
      portkey: () => [portkey.child.pid!],
      'load generator': () => [process.pid],
    };
    const rows: Row[] = [];
    const perSide = <T>(f: () => T) => Object.fromEntries(ALL_SIDES.map((t) => [t, f()])) as Record<Side, T>;
    for (const c of concurrencies) {
      // Every mode of a concurrency in the same rounds, so the Responses rows and the chat rows
      // they are set against meet the same drift of a shared machine.
      const byMode = new Map<Mode, Row>(
        modes.map((mode) => [
          mode,
          { mode, concurrency: c, results: perSide(() => []), cpu: perSide(() => ({})), machineMs: perSide(() => 0) },
        ]),
      );
      for (let r = 0; r < rounds; r++) {
        // Each round starts with the next mode and the next side, so none always runs first or last.
        for (const mode of modes.map((_, i) => modes[(i + r) % modes.length]!)) {
          const row = byMode.get(mode)!;
          const sides = sidesFor(mode);
          for (const t of sides.map((_, i) => sides[(i + r) % sides.length]!)) {
            isolate(t);
            await warm(t, mode, c);
            const at = snapshot(roles);
            const machineBefore = machineBusyMs();
            row.results[t].push(await load(t, mode, { concurrency: c, requests: requestsFor(c) }));
            row.cpu[t] = add(row.cpu[t], diff(at, snapshot(roles)));
            const machineAfter = machineBusyMs();
            row.machineMs[t] +=
              machineBefore === undefined || machineAfter === undefined ? NaN : machineAfter - machineBefore;
          }
        }
      }
      for (const row of byMode.values()) {
        rows.push(row);
        const d = summarise(row.results.direct);
        const s = summarise(row.results.service);
        if (!isChat(row.mode)) {
          const own = (side: Side) => ownCpuPerRequest(row, side);
          process.stderr.write(
            `bench: ${row.mode} c=${c}: service TTFT p50 ${fmt(s.ttft50)} ms, p99 ${fmt(s.ttft99)} ms; rps ${fmt(s.rps)}; ` +
              `CPU per request (web + worker + Redis + Postgres) ${fmt2(own('service'))} ms; errors ${s.errors}${s.errors ? ` (${errorKinds(row.results.service)})` : ''}\n`,
          );
          continue;
        }
        const w = summarise(row.results['two workers']);
        const p = summarise(row.results['pass-through']);
        const k = summarise(row.results.portkey);
        process.stderr.write(
          `bench: ${row.mode} c=${c}: added TTFT p50 ${fmt(s.ttft50 - d.ttft50)} ms, p99 ${fmt(s.ttft99 - d.ttft99)} ms; rps ${fmt(d.rps)} -> ${fmt(s.rps)}` +
            ` (portkey: ${fmt(k.ttft50 - d.ttft50)} / ${fmt(k.ttft99 - d.ttft99)} ms, ${fmt(k.rps)} rps; two workers: ${fmt(w.rps)} rps; pass-through: ${fmt(p.ttft50 - d.ttft50)} / ${fmt(p.ttft99 - d.ttft99)} ms, ${fmt(p.rps)} rps;` +
            ` service CPU per request ${fmt2(ownCpuPerRequest(row, 'service'))} ms)\n`,
        );
      }
    }
    rows.sort((x, y) => modes.indexOf(x.mode) - modes.indexOf(y.mode) || x.concurrency - y.concurrency);
    const chatRows = rows.filter((r) => isChat(r.mode));

    // Open loop: the same Poisson arrival schedule (one seed per rate and round) on every side.
    const rates = a.rates.split(',').filter(Boolean).map(Number);
    const openMs = Number(a['open-seconds']) * (a.quick ? 200 : 1000);
    const openRows: {
      rate: number;
      results: Record<OpenSide, LoadResult[]>;
      lateMs: Record<OpenSide, number>;
      cpu: Record<OpenSide, CpuSnapshot>;
    }[] = [];
    for (const rate of rates) {
      const perSide = <T>(f: () => T) => Object.fromEntries(OPEN_ALL.map((t) => [t, f()])) as Record<OpenSide, T>;
      const row = {
        rate,
        results: perSide((): LoadResult[] => []),
        lateMs: perSide(() => 0),
        cpu: perSide((): CpuSnapshot => ({})),
      };
      for (let r = 0; r < rounds; r++) {
        const order = OPEN_SIDES.map((_, i) => OPEN_SIDES[(i + r) % OPEN_SIDES.length]!);
        for (const t of order) {
          isolate(t);
          // Warm-up at the same rate (a schedule of its own), so no side starts its row cold.
          count(
            t,
            await runOpenLoop({
              ...targets[t],
              stream: true,
              rate,
              durationMs: Math.min(1000, openMs),
              random: seededRandom(rate * 1000 + 500 + r),
            }),
          );
          const at = snapshot(roles);
          const res = count(
            t,
            await runOpenLoop({
              ...targets[t],
              stream: true,
              rate,
              durationMs: openMs,
              random: seededRandom(rate * 1000 + r),
            }),
          );
          row.cpu[t] = add(row.cpu[t], diff(at, snapshot(roles)));
          row.results[t].push(res);
          row.lateMs[t] = Math.max(row.lateMs[t], res.lateMs);
        }
      }
      openRows.push(row);
      const d = summarise(row.results.direct);
      const s = summarise(row.results.service);
      const k = summarise(row.results.portkey);
      process.stderr.write(
        `bench: open loop ${rate}/s: added TTFT p99 service ${fmt(s.ttft99 - d.ttft99)} ms, portkey ${fmt(k.ttft99 - d.ttft99)} ms\n`,
      );
    }

    // Metering must keep up: every request above is one ledger row once the usage stream drains
    // (every copy's workers meter into the same ledger, so all run again for it).
    isolate('all');
    const serviceRequests = sentThroughService;
    const backlog = async () =>
      (
        await Promise.all(
          [config, config2, loadConfig(envTraced), loadConfig(envBefore)]
            .flatMap((c) => usageStreamKeys(c))
            .map((k) => ctx.redis.xlen(k)),
        )
      ).reduce((a, b) => a + b, 0);
    const backlogAtEnd = await backlog();
    const drainStart = performance.now();
    while ((await backlog()) > 0 && performance.now() - drainStart < 30_000)
      await new Promise((r) => setTimeout(r, 50));
    const drainMs = performance.now() - drainStart;
    const recorded = await countUsage(ctx, account.id);

    // Redis memory per request: what a batch of requests through the one-worker service leaves in
    // Redis once each has ended, by kind of key, times how long each kind lives.
    for (const c of copies) for (const p of [c.web, ...c.workers]) stop(p.child);
    await Promise.all(copies.flatMap((c) => [c.web, ...c.workers]).map((p) => exited(p.child)));
    const relayTtlSeconds = config.queue.relayLogTtlSeconds;
    const keyKinds = [
      { name: 'relay log (`rlog`)', match: new RegExp(`^${prefix}:rlog:`), ttlSeconds: relayTtlSeconds },
      { name: 'request state (`req`)', match: new RegExp(`^${prefix}:req:`), ttlSeconds: relayTtlSeconds },
      {
        name: 'settled marker (`limits:…:settled`)',
        match: new RegExp(`^${prefix}:limits:\\{[^}]+\\}:settled:`),
        ttlSeconds: config.limits.settledMarkerTtlMs / 1000,
      },
    ];
    const memoryRedis = new Redis(config.redis.url);
    const redisMemory: { mode: 'stream' | 'json'; figures: RequestKeyFigures }[] = [];
    const chatModes = [true, false].filter((stream) => modes.includes(stream ? 'stream' : 'json'));
    try {
      for (const stream of chatModes) {
        const figures = await measureRequestKeys(memoryRedis, prefix, keyKinds, async () => {
          const r = await runLoad({ ...targets.service, stream, concurrency: 8, requests: MEMORY_SAMPLE_REQUESTS });
          return r.samples.length + Object.values(r.errors).reduce((x, y) => x + y, 0);
        });
        redisMemory.push({ mode: stream ? 'stream' : 'json', figures });
      }
    } finally {
      memoryRedis.disconnect();
    }

    // Idle streams, in a fresh web process so the baseline is not the heap the load left behind.
    // The upstream holds the first token for 10 minutes; the service commits each stream after one
    // heartbeat interval and keeps it alive with comments. Memory is read after a full collection
    // (bench/gc-on-signal.cjs): before the streams, with them open, and once they have closed and
    // the web process says it holds none.
    stop(web.child);
    await exited(web.child);
    const idleWeb = await startProcess(
      path.join(dist, 'src/http/server.js'),
      { ...env, LOG_LEVEL: 'info' },
      /listening on (http:\/\/[^\s"]+)/,
      ['--expose-gc', '--require', path.join(root, 'bench', 'gc-on-signal.cjs')],
    );
    const idleBase = idleWeb.match[1]!;
    const idleUrl = `${idleBase}/v1/chat/completions`;
    let collections = 0;
    idleWeb.child.stderr!.on(
      'data',
      (d: Buffer) => (collections += (d.toString().match(/gc-on-signal: collected/g) ?? []).length),
    );
    const collect = async () => {
      const want = collections + 1;
      idleWeb.child.kill('SIGUSR2');
      while (collections < want) await new Promise((r) => setTimeout(r, 10));
      return {
        rss: rssMiB(idleWeb.child.pid!),
        heap: (await metricValue(idleBase, 'nodejs_heap_size_used_bytes')) / (1024 * 1024),
      };
    };
    await runLoad({
      url: idleUrl,
      apiKey: key.key,
      body: { model: model.id, messages },
      stream: true,
      concurrency: 8,
      requests: 100,
    });
    const streams = Number(a.streams);
    const idleBefore = await collect();
    const held = await holdStreams(
      { url: idleUrl, apiKey: key.key, body: { model: model.id, messages, user: 'ttft=600000' } },
      streams,
    );
    const idleOpen = await collect();
    const relayingOpen = await metricValue(idleBase, 'completion_requests_relaying');
    held.close();
    const closeStart = performance.now();
    while ((await metricValue(idleBase, 'completion_requests_relaying')) > 0 && performance.now() - closeStart < 60_000)
      await new Promise((r) => setTimeout(r, 100));
    const releasedMs = performance.now() - closeStart;
    const relayingClosed = await metricValue(idleBase, 'completion_requests_relaying');
    const idleClosed = await collect();
    stop(idleWeb.child);
    await exited(idleWeb.child);

    const lines: string[] = [];
    lines.push(
      `Upstream: ${a.tokens} tokens per answer, time to first token 0 ms, ${a['itl-ms']} ms between tokens; ${rounds} interleaved rounds per row.`,
    );
    lines.push('');
    lines.push(
      '| mode | concurrency | TTFT p50 direct / service (added) ms | TTFT p99 direct / service (added) ms | total p50 direct / service (added) ms | total p99 direct / service (added) ms | req/s direct / service | errors |',
    );
    lines.push('|---|---|---|---|---|---|---|---|');
    const out: unknown[] = [];
    // A Responses row's direct path is its chat row's: the upstream speaks chat completions alone.
    const chatRowOf = (row: Row) =>
      rows.find((r) => r.mode === chatModeOf(row.mode) && r.concurrency === row.concurrency);
    for (const row of rows) {
      const d = summarise(chatRowOf(row)?.results.direct ?? []);
      const s = summarise(row.results.service);
      out.push({
        mode: row.mode,
        concurrency: row.concurrency,
        direct: d,
        service: s,
        twoWorkers: summarise(row.results['two workers']),
        portkey: summarise(row.results.portkey),
        passThrough: summarise(row.results['pass-through']),
        cpuMs: row.cpu,
        machineBusyMs: row.machineMs,
      });
      lines.push(
        `| ${row.mode} | ${row.concurrency} | ${fmt(d.ttft50)} / ${fmt(s.ttft50)} (**${fmt(s.ttft50 - d.ttft50)}**) | ${fmt(d.ttft99)} / ${fmt(s.ttft99)} (**${fmt(s.ttft99 - d.ttft99)}**) | ` +
          `${fmt(d.total50)} / ${fmt(s.total50)} (${fmt(s.total50 - d.total50)}) | ${fmt(d.total99)} / ${fmt(s.total99)} (${fmt(s.total99 - d.total99)}) | ${fmt(d.rps)} / ${fmt(s.rps)} | ${d.errors} / ${s.errors} |`,
      );
    }
    const responsesRows = rows.filter((r) => !isChat(r.mode));
    if (responsesRows.length > 0) {
      lines.push('');
      lines.push(
        "The Responses API against chat completions, on the service in the same rounds (the Responses rows above take the chat row's direct path as theirs): " +
          "the same model, upstream and prompt (`input` the chat rows' one user message, as a string), each stream read to response.completed and its TTFT taken at the first " +
          'response.output_text.delta. CPU per request, ms, by process, chat / Responses; cores busy is CPU time over wall time for the whole machine (anything else on it included), ' +
          `out of ${cpuCount()} cores.`,
      );
      lines.push('');
      lines.push(
        '| mode | concurrency | TTFT p50 chat / responses ms | total p50 chat / responses ms | total p99 chat / responses ms | req/s chat / responses | web | worker | redis | postgres | all four chat / responses (change) | cores busy, machine | errors |',
      );
      lines.push('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
      for (const row of responsesRows) {
        const chat = chatRowOf(row);
        const c = summarise(chat?.results.service ?? []);
        const x = summarise(row.results.service);
        const role = (r: Row | undefined, name: string) =>
          r ? (r.cpu.service[name] ?? NaN) / Math.max(1, summarise(r.results.service).n) : NaN;
        const pair = (name: string) => `${fmt2(role(chat, name))} / ${fmt2(role(row, name))}`;
        const allChat = chat ? ownCpuPerRequest(chat, 'service') : NaN;
        const allResponses = ownCpuPerRequest(row, 'service');
        const busy = (r: Row | undefined) => (r ? r.machineMs.service / wallOf(r.results.service) : NaN);
        lines.push(
          `| ${row.mode} | ${row.concurrency} | ${fmt(c.ttft50)} / ${fmt(x.ttft50)} | ${fmt(c.total50)} / ${fmt(x.total50)} | ${fmt(c.total99)} / ${fmt(x.total99)} | ${fmt(c.rps)} / ${fmt(x.rps)} | ` +
            `${pair('web')} | ${pair('worker')} | ${pair('redis')} | ${pair('postgres')} | ${fmt2(allChat)} / **${fmt2(allResponses)}** (${fmt((100 * (allResponses - allChat)) / allChat)}%) | ` +
            `${fmt2(busy(chat))} / ${fmt2(busy(row))} | ${c.errors} / ${x.errors} |`,
        );
      }
    }
    lines.push('');
    lines.push(
      'Reference, in the same rounds: a bare pass-through proxy in Node (bench/pass-through.ts: no auth, no limits, no queue, no Redis) against the same upstream.',
    );
    lines.push('');
    lines.push(
      '| mode | concurrency | added TTFT p50 ms | added TTFT p99 ms | added total p50 ms | added total p99 ms | req/s direct / pass-through | errors |',
    );
    lines.push('|---|---|---|---|---|---|---|---|');
    for (const row of chatRows) {
      const d = summarise(row.results.direct);
      const p = summarise(row.results['pass-through']);
      lines.push(
        `| ${row.mode} | ${row.concurrency} | ${fmt(p.ttft50 - d.ttft50)} | ${fmt(p.ttft99 - d.ttft99)} | ${fmt(p.total50 - d.total50)} | ${fmt(p.total99 - d.total99)} | ${fmt(d.rps)} / ${fmt(p.rps)} | ${p.errors} |`,
      );
    }
    lines.push('');
    lines.push(
      `Against the reference gateway, in the same rounds: Portkey's AI gateway ${PORTKEY_VERSION} (bench/peers.ts: one Node process, no accounts, no limits, no queue, no ledger) ` +
        'against the same upstream. Added is over the direct path of the same row; ✓ marks where the service is at least as good.',
    );
    lines.push('');
    lines.push(
      '| mode | concurrency | added TTFT p50 service / Portkey ms | added TTFT p99 service / Portkey ms | req/s service / Portkey | service ahead | errors service / Portkey |',
    );
    lines.push('|---|---|---|---|---|---|---|');
    let ahead = 0;
    for (const row of chatRows) {
      const d = summarise(row.results.direct);
      const s = summarise(row.results.service);
      const k = summarise(row.results.portkey);
      const wins = [s.ttft50 <= k.ttft50, s.ttft99 <= k.ttft99, s.rps >= k.rps];
      ahead += wins.filter(Boolean).length;
      const mark = (w: boolean) => (w ? ' ✓' : '');
      lines.push(
        `| ${row.mode} | ${row.concurrency} | ${fmt(s.ttft50 - d.ttft50)} / ${fmt(k.ttft50 - d.ttft50)}${mark(wins[0]!)} | ${fmt(s.ttft99 - d.ttft99)} / ${fmt(k.ttft99 - d.ttft99)}${mark(wins[1]!)} | ` +
          `${fmt(s.rps)} / ${fmt(k.rps)}${mark(wins[2]!)} | ${wins.filter(Boolean).length} of 3 | ${s.errors} / ${k.errors} |`,
      );
    }
    lines.push('');
    lines.push(`The service is at least as good on ${ahead} of ${chatRows.length * 3} figures.`);
    lines.push('');
    lines.push(
      `Open loop: streams arrive as a Poisson process at a fixed rate for ${fmt(openMs / 1000)} s per side and round (${rounds} rounds, the same arrival times on every side), ` +
        "whether or not earlier ones have finished; time to first token is counted from each request's scheduled arrival. Added is over the direct path at the same rate.",
    );
    lines.push('');
    lines.push(
      '| rate /s | side | requests | added TTFT p50 ms | added TTFT p99 ms | added TTFT p99.9 ms | total p99 ms | CPU ms per request | errors |',
    );
    lines.push('|---|---|---|---|---|---|---|---|---|');
    for (const row of openRows) {
      const d = summarise(row.results.direct);
      const ownCpu: Record<OpenSide, string[]> = {
        direct: [],
        service: ['web', 'worker', 'redis', 'postgres'],
        before: ['web before', 'worker before', 'redis', 'postgres'],
        portkey: ['portkey'],
        'pass-through': ['pass-through'],
      };
      for (const t of OPEN_SIDES) {
        const x = summarise(row.results[t]);
        const cpu = ownCpu[t].reduce((sum, r) => sum + (row.cpu[t][r] ?? 0), 0) / Math.max(1, x.n);
        const added = (v: number, base: number) => (t === 'direct' ? `${fmt(v)} (direct)` : fmt(v - base));
        lines.push(
          `| ${row.rate} | ${t} | ${x.n} | ${added(x.ttft50, d.ttft50)} | ${added(x.ttft99, d.ttft99)} | ${added(x.ttft999, d.ttft999)} | ${fmt(x.total99)} | ${t === 'direct' ? '' : fmt2(cpu)} | ${x.errors} |`,
        );
      }
    }
    // CPU ms per request of one role (or the sum of several) during one side's runs.
    const perRequest = (row: Row, side: Side) => {
      const n = row.results[side].reduce((s, r) => s + r.samples.length, 0);
      return (...names: string[]) => {
        const known = names.filter((r) => row.cpu[side][r] !== undefined);
        return known.length === 0 ? NaN : known.reduce((t, r) => t + row.cpu[side][r]!, 0) / Math.max(1, n);
      };
    };
    const allRoles = (row: Row, side: Side) => Object.keys(row.cpu[side]);
    // Cores kept busy during one side's runs: by the benchmark's own processes, and by everything on the machine.
    const cores = (row: Row, side: Side) => {
      const wall = wallOf(row.results[side]);
      const ours = Object.values(row.cpu[side]).reduce((t, ms) => t + ms, 0);
      return { ours: ours / wall, machine: row.machineMs[side] / wall };
    };
    lines.push('');
    lines.push(
      'CPU per request, ms, by process (through the service; "all" is every process of the benchmark, idle ones included; the last two columns are the whole direct and pass-through runs):',
    );
    lines.push('');
    lines.push(`| mode | concurrency | ${CPU_ROLES.join(' | ')} | all | direct | pass-through |`);
    lines.push(`|---|---|${CPU_ROLES.map(() => '---|').join('')}---|---|---|`);
    for (const row of rows) {
      const s = perRequest(row, 'service');
      const d = perRequest(row, 'direct');
      const p = perRequest(row, 'pass-through');
      lines.push(
        `| ${row.mode} | ${row.concurrency} | ${CPU_ROLES.map((r) => fmt2(s(r))).join(' | ')} | ${fmt2(s(...allRoles(row, 'service')))} | ${fmt2(d(...allRoles(row, 'direct')))} | ${fmt2(p(...allRoles(row, 'pass-through')))} |`,
      );
    }
    if (a.tracing) {
      lines.push('');
      lines.push(
        'Tracing on, in the same rounds: a third copy of the service (one web, one worker) with OpenTelemetry tracing on, every trace kept and exported over OTLP/HTTP ' +
          '(to the fake upstream, which drops them). CPU per request of web + worker + Redis + Postgres:',
      );
      lines.push('');
      lines.push(
        '| mode | concurrency | service ms | traced ms | tracing costs | req/s service / traced | errors traced |',
      );
      lines.push('|---|---|---|---|---|---|---|');
      for (const row of rows) {
        const plain = perRequest(row, 'service')('web', 'worker', 'redis', 'postgres');
        const withTraces = perRequest(row, 'traced')(...TRACED_ROLES, 'redis', 'postgres');
        const s = summarise(row.results.service);
        const t = summarise(row.results.traced);
        lines.push(
          `| ${row.mode} | ${row.concurrency} | ${fmt2(plain)} | ${fmt2(withTraces)} | **${fmt((100 * (withTraces - plain)) / plain)}%** | ${fmt(s.rps)} / ${fmt(t.rps)} | ${t.errors} |`,
        );
      }
    }
    if (has('before')) {
      lines.push('');
      lines.push(
        `This build against the build before (${a.before}), in the same rounds, each side alone on the machine: CPU per request, ms, ` +
          "by process (Redis and Postgres as measured during each side's runs), and Portkey's process for reference.",
      );
      lines.push('');
      lines.push(
        '| mode | concurrency | web before / after | worker before / after | redis before / after | postgres before / after | all four before / after (change) | Portkey | req/s before / after |',
      );
      lines.push('|---|---|---|---|---|---|---|---|---|');
      for (const row of rows) {
        const b = perRequest(row, 'before');
        const s = perRequest(row, 'service');
        const k = perRequest(row, 'portkey');
        const own = ['redis', 'postgres'];
        const totalB = b('web before', 'worker before', ...own);
        const totalS = s('web', 'worker', ...own);
        lines.push(
          `| ${row.mode} | ${row.concurrency} | ${fmt2(b('web before'))} / ${fmt2(s('web'))} | ${fmt2(b('worker before'))} / ${fmt2(s('worker'))} | ` +
            `${fmt2(b('redis'))} / ${fmt2(s('redis'))} | ${fmt2(b('postgres'))} / ${fmt2(s('postgres'))} | ` +
            `${fmt2(totalB)} / **${fmt2(totalS)}** (${fmt((100 * (totalS - totalB)) / totalB)}%) | ${fmt2(k('portkey'))} | ` +
            `${fmt(summarise(row.results.before).rps)} / ${fmt(summarise(row.results.service).rps)} |`,
        );
      }
    }
    const c32 = rows.find((r) => r.mode === 'stream' && r.concurrency === 32);
    if (c32) {
      const s = perRequest(c32, 'service');
      const k = perRequest(c32, 'portkey');
      lines.push('');
      lines.push(
        `CPU per streamed request at concurrency 32: the service's own processes (web ${fmt2(s('web'))} + worker ${fmt2(s('worker'))} + Redis ${fmt2(s('redis'))} + Postgres ${fmt2(s('postgres'))}) ` +
          `**${fmt2(s('web', 'worker', 'redis', 'postgres'))} ms**, Portkey's process **${fmt2(k('portkey'))} ms**, the pass-through's ${fmt2(perRequest(c32, 'pass-through')('pass-through'))} ms.`,
      );
    }
    lines.push('');
    lines.push(
      'One worker process against two, in the same rounds: the same web configuration and load, the second copy of the service with two worker processes behind its one web process. ' +
        "Cores busy is CPU time over wall time during that side's runs, for the benchmark's own processes and for the whole machine (anything else running on it included), out of " +
        `${cpuCount()} cores.`,
    );
    lines.push('');
    lines.push(
      '| mode | concurrency | req/s 1 / 2 workers (ratio) | TTFT p50 1 / 2 workers ms | TTFT p99 1 / 2 workers ms | total p50 1 / 2 workers ms | total p99 1 / 2 workers ms | cores busy, ours 1 / 2 workers | cores busy, machine 1 / 2 workers | errors |',
    );
    lines.push('|---|---|---|---|---|---|---|---|---|---|');
    for (const row of chatRows) {
      const s = summarise(row.results.service);
      const w = summarise(row.results['two workers']);
      const c1 = cores(row, 'service');
      const c2 = cores(row, 'two workers');
      lines.push(
        `| ${row.mode} | ${row.concurrency} | ${fmt(s.rps)} / ${fmt(w.rps)} (**${fmt2(w.rps / s.rps)}**) | ${fmt(s.ttft50)} / ${fmt(w.ttft50)} | ${fmt(s.ttft99)} / ${fmt(w.ttft99)} | ` +
          `${fmt(s.total50)} / ${fmt(w.total50)} | ${fmt(s.total99)} / ${fmt(w.total99)} | ${fmt2(c1.ours)} / ${fmt2(c2.ours)} | ${fmt2(c1.machine)} / ${fmt2(c2.machine)} | ${s.errors} / ${w.errors} |`,
      );
    }
    lines.push('');
    lines.push(
      'CPU per request with two workers, ms, by process (the last column is "all" with one worker, from the table above):',
    );
    lines.push('');
    const twoWorkerColumns = ['web', 'worker 1', 'worker 2', 'redis', 'postgres', 'upstream', 'load generator'];
    lines.push(`| mode | concurrency | ${twoWorkerColumns.join(' | ')} | all | all, 1 worker |`);
    lines.push(`|---|---|${twoWorkerColumns.map(() => '---|').join('')}---|---|`);
    for (const row of chatRows) {
      const w = perRequest(row, 'two workers');
      const s = perRequest(row, 'service');
      const cells = [...TWO_WORKER_ROLES, 'redis', 'postgres', 'upstream', 'load generator'].map((r) => w(r));
      lines.push(
        `| ${row.mode} | ${row.concurrency} | ${cells.map(fmt2).join(' | ')} | ${fmt2(w(...allRoles(row, 'two workers')))} | ${fmt2(s(...allRoles(row, 'service')))} |`,
      );
    }
    lines.push('');
    lines.push(
      `Redis memory per request: the keys ${MEMORY_SAMPLE_REQUESTS} requests per mode (concurrency 8, one-worker service) left once they ended, ` +
        'MEMORY USAGE of each key (up to 100 per kind), times how long the key lives after its request ends.',
    );
    lines.push('');
    lines.push(
      '| mode | key | keys per request | bytes per key | TTL after the end, s (observed) | byte-seconds per request |',
    );
    lines.push('|---|---|---|---|---|---|');
    for (const { mode, figures } of redisMemory) {
      for (const k of figures.kinds) {
        lines.push(
          `| ${mode} | ${k.name} | ${fmt2(k.keysPerRequest)} | ${fmt(k.bytesPerKey)} | ${fmt(k.ttlSeconds)} (${fmt(k.observedTtlSeconds)}) | ${(k.bytesPerRequest * k.ttlSeconds).toFixed(0)} |`,
        );
      }
    }
    lines.push('');
    for (const { mode, figures } of redisMemory) {
      const perRequestBytes = figures.kinds.reduce((t, k) => t + k.bytesPerRequest, 0);
      const other = Object.entries(figures.otherKeys).map(([shape, n]) => `${shape} ×${n}`);
      lines.push(
        `Redis, ${mode}: ${fmt(perRequestBytes)} bytes per request in these keys (INFO used_memory grew ${fmt(figures.usedMemoryPerRequest)} bytes per request); ` +
          `held at a steady ${fmt(MiB(steadyStateBytes(figures.kinds, 100)))} MiB at 100 req/s and ${fmt(MiB(steadyStateBytes(figures.kinds, 1000)))} MiB at 1,000 req/s. ` +
          `Other new keys, by shape and count (per request only if the count is near ${figures.requests}): ${other.length === 0 ? 'none' : other.join(', ')}.`,
      );
    }
    lines.push('');
    const perStream = (mib: number) => fmt((mib * 1024) / Math.max(1, held.established));
    lines.push(
      `Idle streams: ${held.established} of ${streams} established on one web process (it counted ${relayingOpen} open). After a full collection: ` +
        `RSS ${fmt(idleBefore.rss)} MiB before, ${fmt(idleOpen.rss)} MiB with them open (**${perStream(idleOpen.rss - idleBefore.rss)} KiB per stream**), ${fmt(idleClosed.rss)} MiB after they closed; ` +
        `V8 heap used ${fmt(idleBefore.heap)} / ${fmt(idleOpen.heap)} (${perStream(idleOpen.heap - idleBefore.heap)} KiB per stream) / ${fmt(idleClosed.heap)} MiB. ` +
        `All released: ${relayingClosed === 0 ? 'yes' : `no, ${relayingClosed} still counted`}, ${fmt(releasedMs)} ms after the client closed them.`,
    );
    lines.push(
      `Metering: ${recorded} ledger rows for ${serviceRequests} requests through the service; usage stream backlog ${backlogAtEnd} when the load stopped, drained in ${fmt(drainMs)} ms.`,
    );
    process.stdout.write(`\n${lines.join('\n')}\n`);
    mkdirSync(path.join(root, 'var', 'bench'), { recursive: true });
    writeFileSync(
      path.join(root, 'var', 'bench', 'results.json'),
      JSON.stringify(
        {
          at: new Date().toISOString(),
          portkey: PORTKEY_VERSION,
          rows: out,
          openLoop: openRows.map((r) => ({
            rate: r.rate,
            lateMs: r.lateMs,
            cpuMs: r.cpu,
            ...Object.fromEntries(OPEN_SIDES.map((t) => [t, summarise(r.results[t])])),
          })),
          redisMemory,
          idle: {
            streams,
            established: held.established,
            before: idleBefore,
            open: idleOpen,
            closed: idleClosed,
            relayingOpen,
            relayingClosed,
            releasedMs,
          },
        },
        null,
        2,
      ),
    );
  } finally {
    // A stopped process handles no SIGTERM: every side runs again first.
    isolate('all');
    const all = [web, worker, ...copies.flatMap((c) => [c.web, ...c.workers])];
    for (const p of all) stop(p.child);
    await Promise.all(all.map((p) => exited(p.child)));
    upstream.kill('SIGTERM');
    proxy.kill('SIGTERM');
    portkey.child.kill('SIGTERM');
    await ctx.db.deleteFrom('usage_events').where('account_id', '=', account.id).execute();
    await ctx.db.deleteFrom('accounts').where('id', '=', account.id).execute();
    const r = new Redis(config.redis.url);
    let cursor = '0';
    do {
      const [nextCursor, keys] = await r.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
      cursor = nextCursor;
      if (keys.length) await r.unlink(...keys);
    } while (cursor !== '0');
    r.disconnect();
    await ctx.close();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`bench failed: ${err instanceof Error ? err.stack : String(err)}\n`);
    process.exit(1);
  },
);
