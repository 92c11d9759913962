import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { cruise, type ICruiseResult, type IConfiguration } from 'dependency-cruiser';

// The layer rules `npm test` enforces on the real tree (.dependency-cruiser.cjs), run here on small
// trees written for each case, so a rule that stopped catching its import would fail a test.
const rules = createRequire(import.meta.url)(path.resolve('.dependency-cruiser.cjs')) as IConfiguration;

type Tree = Record<string, string>;

/** Stand-ins for the packages the rules name: enough for the resolver to find them in node_modules. */
const PACKAGES: Tree = Object.fromEntries(
  ['koa', 'bullmq', 'kysely'].flatMap((name) => [
    [`node_modules/${name}/package.json`, JSON.stringify({ name, main: 'index.js' })],
    [`node_modules/${name}/index.js`, 'module.exports = {};'],
  ]),
);

// Each case writes its own tree under a fresh temporary root (see the describe's hooks).
let root: string;

async function cruiseTree(tree: Tree): Promise<ICruiseResult> {
  for (const [file, text] of Object.entries({ ...PACKAGES, ...tree })) {
    await mkdir(path.dirname(path.join(root, file)), { recursive: true });
    await writeFile(path.join(root, file), text);
  }
  const result = await cruise(
    ['src', 'workers', 'scripts', 'console'].filter((d) => Object.keys(tree).some((f) => f.startsWith(`${d}/`))),
    {
      validate: true,
      ruleSet: { forbidden: rules.forbidden ?? [] },
      doNotFollow: { path: 'node_modules' },
      tsPreCompilationDeps: true,
      // Paths in the rules are relative to the tree's root, as they are to the repository's.
      baseDir: root,
    },
    // Imports name the compiled .js file, as NodeNext wants; the tree holds the .ts source.
    { extensionAlias: { '.js': ['.ts', '.js'] } },
  );
  return result.output as ICruiseResult;
}

async function violations(tree: Tree): Promise<string[]> {
  const output = await cruiseTree(tree);
  return [...new Set(output.summary.violations.map((v) => v.rule.name))].sort();
}

/**
 * The layers as README "Dependency rules" writes them, lowest first, with one module in each
 * room; rooms of one layer share a row.
 */
const LAYERS: Record<string, string>[] = [
  { core: 'src/calendar.ts' },
  { infra: 'src/infra/x.ts', providers: 'src/providers/x.ts' },
  { catalog: 'src/catalog/x.ts' },
  { usage: 'src/usage/x.ts' },
  { limits: 'src/limits/x.ts' },
  { accounts: 'src/accounts/x.ts' },
  { 'console-identity': 'src/console-identity/x.ts' },
  { billing: 'src/billing/x.ts' },
  { subscriptions: 'src/subscriptions/x.ts' },
  { chat: 'src/chat/x.ts' },
  { responses: 'src/responses/x.ts' },
  { health: 'src/health/x.ts', scheduler: 'src/scheduler/x.ts' },
];

/** `import` of `to` from `from`, both paths from the root. */
function importOf(from: string, to: string): string {
  let rel = path.posix.relative(path.posix.dirname(from), to).replace(/[.]ts$/, '.js');
  if (!rel.startsWith('.')) rel = `./${rel}`;
  const name = `v${to.replace(/\W/g, '_')}`;
  return `import { v as ${name} } from '${rel}';\n`;
}

describe('dependency rules (.dependency-cruiser.cjs)', () => {
  beforeEach(async () => {
    root = await mkdtemp(path.join(os.tmpdir(), 'layers-'));
  });
  afterEach(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it('accept a feature that imports the core, infra and its own repository', async () => {
    expect(
      await violations({
        'src/errors.ts': 'export const e = 1;',
        'src/infra/redis.ts': 'export const r = 1;',
        'src/billing/invoices.repository.ts': "import { sql } from 'kysely';\nexport const q = sql;",
        'src/billing/invoicing.service.ts':
          "import { e } from '../errors.js';\nimport { r } from '../infra/redis.js';\nimport { q } from './invoices.repository.js';\nexport const s = [e, r, q];",
      }),
    ).to.deep.equal([]);
  });

  it('refuse service code that imports the console (a browser app, bundled on its own)', async () => {
    expect(
      await violations({
        'console/format.ts': 'export const usd = 1;',
        'src/http/routes/console-assets.routes.ts':
          "import { usd } from '../../../console/format.js';\nexport const r = usd;",
      }),
    ).to.deep.equal(['console-is-not-imported']);
  });

  it('refuse a console module that imports the service’s code', async () => {
    expect(
      await violations({
        'src/errors.ts': 'export const e = 1;',
        'console/api.ts': "import { e } from '../src/errors.js';\nexport const a = e;",
      }),
    ).to.deep.equal(['console-imports-no-service-code']);
  });

  it('refuse a web-side chat module that imports the worker side (they meet at the relay)', async () => {
    expect(
      await violations({
        'src/chat/job/run-job.ts': 'export const run = 1;',
        'src/chat/request/admission.ts': "import { run } from '../job/run-job.js';\nexport const a = run;",
      }),
    ).to.deep.equal(['web-side-and-worker-side-meet-at-the-relay']);
  });

  it('refuse a worker-side chat module, or the worker entry, that imports the web side', async () => {
    expect(
      await violations({
        'src/chat/request/admission.ts': 'export const admit = 1;',
        'src/chat/job/run-job.ts': "import { admit } from '../request/admission.js';\nexport const r = admit;",
        'workers/completion.ts': "import { admit } from '../src/chat/request/admission.js';\nexport const w = admit;",
      }),
    ).to.deep.equal(['worker-side-does-not-import-the-web-side']);
  });

  it('refuse a relay or stream module that imports either side', async () => {
    expect(
      await violations({
        'src/chat/job/run-job.ts': 'export const run = 1;',
        'src/chat/relay/publisher.ts': "import { run } from '../job/run-job.js';\nexport const p = run;",
      }),
    ).to.deep.equal(['relay-and-stream-are-shared-by-both-sides']);
  });

  it('accept both sides importing the relay and the stream', async () => {
    expect(
      await violations({
        'src/chat/relay/protocol.ts': 'export const key = 1;',
        'src/chat/stream/sse.ts': "import { key } from '../relay/protocol.js';\nexport const frame = key;",
        'src/chat/request/dispatch.service.ts':
          "import { key } from '../relay/protocol.js';\nimport { frame } from '../stream/sse.js';\nexport const d = [key, frame];",
        'src/chat/job/run-job.ts':
          "import { key } from '../relay/protocol.js';\nimport { frame } from '../stream/sse.js';\nexport const r = [key, frame];",
      }),
    ).to.deep.equal([]);
  });

  it('refuse a feature that imports the HTTP edge', async () => {
    expect(
      await violations({
        'src/http/app.ts': 'export const app = 1;',
        'src/billing/invoicing.service.ts': "import { app } from '../http/app.js';\nexport const s = app;",
      }),
    ).to.deep.equal(['edges-are-not-imported']);
  });

  it('refuse a module of src/ that is in no room, and an import of one', async () => {
    expect(
      await violations({
        'src/clock.ts': 'export const clock = 1;',
        'src/helpers.ts': "import { clock } from './clock.js';\nexport const h = clock;",
        'src/chat/relay.ts': "import { h } from '../helpers.js';\nexport const r = h;",
      }),
    ).to.deep.equal(['every-module-in-a-room', 'imports-only-modules-in-a-room']);
  });

  it('refuse a feature that reads the process context', async () => {
    expect(
      await violations({
        'src/context.ts': 'export const ctx = 1;',
        'src/chat/relay.ts': "import { ctx } from '../context.js';\nexport const r = ctx;",
      }),
    ).to.deep.equal(['features-do-not-see-the-context']);
  });

  it('refuse koa outside src/http', async () => {
    expect(
      await violations({ 'src/accounts/signup.service.ts': "import koa from 'koa';\nexport const k = koa;" }),
    ).to.deep.equal(['only-http-knows-koa']);
  });

  it('refuse bullmq outside the queue factory', async () => {
    expect(
      await violations({ 'workers/worker.ts': "import { Queue } from 'bullmq';\nexport const q = Queue;" }),
    ).to.deep.equal(['only-infra-queues-knows-bullmq']);
  });

  it('refuse SQL written outside a repository', async () => {
    expect(
      await violations({ 'src/usage/metering.service.ts': "import { sql } from 'kysely';\nexport const q = sql;" }),
    ).to.deep.equal(['only-repositories-write-sql']);
  });

  it('refuse a worker that writes through a repository instead of its service', async () => {
    expect(
      await violations({
        'src/usage/usage.repository.ts': 'export const insert = 1;',
        'workers/completion.ts': "import { insert } from '../src/usage/usage.repository.js';\nexport const w = insert;",
      }),
    ).to.deep.equal(['edges-call-services-not-repositories']);
  });

  it('refuse a script that reads through a repository instead of its service', async () => {
    expect(
      await violations({
        'src/accounts/accounts.repository.ts': 'export const find = 1;',
        'scripts/mint-jwt.ts': "import { find } from '../src/accounts/accounts.repository.js';\nexport const m = find;",
      }),
    ).to.deep.equal(['edges-call-services-not-repositories']);
  });

  it('refuse a provider that imports a feature', async () => {
    expect(
      await violations({
        'src/billing/prices.ts': 'export const p = 1;',
        'src/providers/openai/openai.provider.ts': "import { p } from '../../billing/prices.js';\nexport const o = p;",
      }),
    ).to.deep.equal(['providers-imports-only-lower-layers']);
  });

  it('refuse every import into a higher layer or a sibling room, and accept every import downward', async () => {
    const rooms = LAYERS.flatMap((layer, level) =>
      Object.entries(layer).map(([room, file]) => ({ room, file, level })),
    );
    // Every room imports every other room: the rules must flag exactly the imports that go up or sideways.
    const tree: Tree = Object.fromEntries(
      rooms.map(({ file }) => [
        file,
        rooms
          .filter((r) => r.file !== file)
          .map((r) => importOf(file, r.file))
          .join('') + 'export const v = 1;\nexport type V = number;\n',
      ]),
    );
    const output = await cruiseTree(tree);
    const found = output.summary.violations
      .filter((v) => v.rule.name.endsWith('-imports-only-lower-layers'))
      .map((v) => `${v.from} -> ${v.to}`)
      .sort();
    const expected = rooms
      .flatMap((a) => rooms.filter((b) => b.file !== a.file && b.level >= a.level).map((b) => `${a.file} -> ${b.file}`))
      .sort();
    expect(found).to.deep.equal(expected);
    for (const v of output.summary.violations.filter((v) => v.rule.name.endsWith('-imports-only-lower-layers')))
      expect(v.rule.name).to.equal(`${rooms.find((r) => r.file === v.from)!.room}-imports-only-lower-layers`);
  });

  it('refuse a type-only import into a higher layer', async () => {
    expect(
      await violations({
        'src/billing/spend-limit.service.ts': 'export type Limit = number;',
        'src/limits/limiter.service.ts':
          "import type { Limit } from '../billing/spend-limit.service.js';\nexport type L = Limit;",
      }),
    ).to.deep.equal(['limits-imports-only-lower-layers']);
  });

  it('refuse usage calling into billing (metering raises a hook instead)', async () => {
    expect(
      await violations({
        'src/billing/spend-alerts.service.ts': 'export const queueAlerts = 1;',
        'src/usage/metering.service.ts':
          "import { queueAlerts } from '../billing/spend-alerts.service.js';\nexport const m = queueAlerts;",
      }),
    ).to.deep.equal(['usage-imports-only-lower-layers']);
  });

  it("accept config reading the providers' plug-ins, and refuse the core importing a feature", async () => {
    expect(
      await violations({
        'src/providers/providers.ts': 'export const PROVIDERS = [];',
        'src/config.ts': "import { PROVIDERS } from './providers/providers.js';\nexport const c = PROVIDERS;",
      }),
    ).to.deep.equal([]);
    expect(
      await violations({
        'src/billing/periods.ts': 'export const monthOf = 1;',
        'src/calendar.ts': "import { monthOf } from './billing/periods.js';\nexport const c = monthOf;",
      }),
    ).to.deep.equal(['core-imports-only-lower-layers']);
  });

  it("refuse a feature that calls another feature's repository", async () => {
    expect(
      await violations({
        'src/accounts/accounts.repository.ts': 'export const lockAccount = 1;',
        'src/subscriptions/tier.service.ts':
          "import { lockAccount } from '../accounts/accounts.repository.js';\nexport const t = lockAccount;",
      }),
    ).to.deep.equal(['features-call-services-not-repositories']);
  });

  it("accept a feature that calls another feature's service and takes types from its repository", async () => {
    expect(
      await violations({
        'src/accounts/accounts.repository.ts': 'export const lockAccount = 1;\nexport type Account = { id: string };',
        'src/accounts/account-billing.service.ts':
          "import { lockAccount } from './accounts.repository.js';\nexport const lock = lockAccount;",
        'src/subscriptions/tier.service.ts':
          "import type { Account } from '../accounts/accounts.repository.js';\nimport { lock } from '../accounts/account-billing.service.js';\nexport const t: [unknown, Account?] = [lock];",
      }),
    ).to.deep.equal([]);
  });

  it('refuse service code that imports a fake', async () => {
    expect(
      await violations({
        'src/providers/openai/openai.fake.ts': 'export const f = 1;',
        'src/providers/openai/openai.provider.ts': "import { f } from './openai.fake.js';\nexport const o = f;",
      }),
    ).to.deep.equal(['no-test-code-in-the-service']);
  });

  it('refuse an import cycle, type-only imports included', async () => {
    expect(
      await violations({
        'src/chat/a.ts': "import type { B } from './b.js';\nexport type A = { b?: B };",
        'src/chat/b.ts': "import type { A } from './a.js';\nexport type B = { a?: A };",
      }),
    ).to.deep.equal(['no-cycles']);
  });
});
