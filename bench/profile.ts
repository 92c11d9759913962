// Where a process's CPU goes, from a V8 CPU profile written by `npm run bench -- --cpu-prof`:
// every sample's time is put in the bucket of the nearest frame (from the leaf up) that a rule
// knows, so a Redis write made by the relay counts as relay, and one made by BullMQ as BullMQ.
// Time with no known frame above it goes to its leaf's package (Redis replies parsed off the
// socket, for one). Divided by the requests the process served, it is CPU per request by part.
//
//   node dist/bench/profile.js var/bench/profiles/CPU.<...>.cpuprofile [--requests N]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

interface Frame {
  functionName: string;
  url: string;
}
interface ProfileNode {
  id: number;
  callFrame: Frame;
  children?: number[];
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** First match wins, tried on each frame from the leaf up. */
const RULES: [string, (f: Frame) => boolean][] = [
  [
    'relay: publish, log and acknowledgements',
    (f) => /\/chat\/relay\/(publisher|relay-call|relay-batch|log|acks|claim)\./.test(f.url),
  ],
  [
    'relay: receive and write to the client (web)',
    (f) =>
      /\/chat\/relay\/(hub|follower|log-tail|readers|order)\.|\/chat\/stream\/(sse|completion-stream|resumed-completion)\./.test(
        f.url,
      ) ||
      (f.url.includes('/chat/request/dispatch.service.') && f.functionName !== 'dispatch'),
  ],
  ['Responses: stored-response write', (f) => f.url.includes('/responses/stored-response')],
  ['Responses: framing events (presenter)', (f) => f.url.includes('/chat/stream/presenters/response')],
  ['Responses: request translation', (f) => /\/chat\/request\/responses-|\/http\/routes\/responses\./.test(f.url)],
  ['prompt token count', (f) => /\/providers\/tokenizer\.|gpt-tokenizer/.test(f.url)],
  ['upstream request and SSE parse', (f) => /\/providers\/|eventsource-parser/.test(f.url)],
  [
    'completion run: framing chunks, choices',
    (f) =>
      /\/chat\/job\/(upstream-loop|billable|delivery|settle|answer)\.|\/chat\/stream\/(presenters\/|choices\.)/.test(
        f.url,
      ),
  ],
  [
    'claim and job control',
    (f) => /\/chat\/job\/(run-job|claim-job|take-over|completion-jobs)\.|\/workers\/completion\./.test(f.url),
  ],
  ['usage stream append (worker)', (f) => f.url.includes('/usage/usage-stream.')],
  ['limits script: admission (web), settlement (worker)', (f) => f.url.includes('/limits/limiter.service.')],
  [
    'metering: usage stream to Postgres',
    (f) => f.url.includes('/usage/metering.') || f.url.includes('/workers/metering.'),
  ],
  ['email outbox poll', (f) => f.url.includes('email-outbox') || f.url.includes('email-sender')],
  ['liveness and presence keys', (f) => f.url.includes('/chat/relay/liveness.')],
  [
    'admission: validation, queue add',
    (f) =>
      /\/http\/routes\/chat\.routes\.|\/chat\/request\/(chat\.service|dispatch\.service|admission|request-forms)\./.test(
        f.url,
      ),
  ],
  [
    'HTTP middleware (auth, body, logging, metrics)',
    (f) => /\/http\/(middleware|app)\.|\/http\/middleware\//.test(f.url) || /\/(koa|@koa)\//.test(f.url),
  ],
  ['BullMQ (job lifecycle)', (f) => f.url.includes('/bullmq/')],
  ['metrics and logs', (f) => /prom-client|pino/.test(f.url)],
  [
    'module loading (start-up)',
    (f) => f.url.startsWith('node:internal/modules') || f.functionName === 'compileSourceTextModule',
  ],
];

function leafPackage(f: Frame): string {
  if (!f.url) return f.functionName || '(native)';
  const m = /node_modules\/((@[^/]+\/)?[^/]+)/.exec(f.url);
  if (m) return `other: ${m[1]}`;
  if (f.url.startsWith('node:')) return `other: ${f.url}`;
  return 'other: service code';
}

const STOPPED_GAP_US = 50_000;

export function attribute(profile: CpuProfile): { total: number; buckets: Map<string, number> } {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const bucketOf = new Map<number, string>();
  const resolve = (id: number): string => {
    const known = bucketOf.get(id);
    if (known) return known;
    const leaf = byId.get(id)!.callFrame;
    let bucket: string | undefined;
    if (leaf.functionName === '(idle)' || leaf.functionName === '(program)') bucket = leaf.functionName;
    else if (leaf.functionName === '(garbage collector)') bucket = 'garbage collection';
    for (let cur: number | undefined = id; bucket === undefined && cur !== undefined; cur = parent.get(cur)) {
      const f = byId.get(cur)!.callFrame;
      bucket = RULES.find(([, test]) => test(f))?.[0];
    }
    bucket ??= leafPackage(leaf);
    bucketOf.set(id, bucket);
    return bucket;
  };
  const buckets = new Map<string, number>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const us = profile.timeDeltas[i] ?? 0;
    // V8 samples every millisecond or so; a gap far longer is the process stopped (the benchmark
    // stops each side between its turns), which would otherwise count as work of whatever was on the stack.
    if (us > STOPPED_GAP_US) return;
    const b = resolve(id);
    buckets.set(b, (buckets.get(b) ?? 0) + us);
    if (b !== '(idle)') total += us;
  });
  return { total, buckets };
}

if (process.argv[1]?.endsWith('profile.js')) {
  const { values, positionals } = parseArgs({ allowPositionals: true, options: { requests: { type: 'string' } } });
  const requests = Number(values.requests ?? NaN);
  for (const file of positionals) {
    const { total, buckets } = attribute(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile);
    process.stdout.write(
      `\n${file}: ${(total / 1000).toFixed(0)} ms busy${Number.isFinite(requests) ? `, ${requests} requests` : ''}\n`,
    );
    process.stdout.write(
      `| part | busy ms | share |${Number.isFinite(requests) ? ' µs per request |' : ''}\n|---|---|---|${Number.isFinite(requests) ? '---|' : ''}\n`,
    );
    for (const [b, us] of [...buckets].filter(([b]) => b !== '(idle)').sort((x, y) => y[1] - x[1])) {
      if (us / total < 0.005) continue;
      process.stdout.write(
        `| ${b} | ${(us / 1000).toFixed(0)} | ${((100 * us) / total).toFixed(1)}% |${Number.isFinite(requests) ? ` ${(us / requests).toFixed(0)} |` : ''}\n`,
      );
    }
  }
}
