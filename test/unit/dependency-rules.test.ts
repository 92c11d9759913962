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

let root: string;
beforeEach(async () => {
  root = await mkdtemp(path.join(os.tmpdir(), 'layers-'));
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

async function violations(tree: Tree): Promise<string[]> {
  for (const [file, text] of Object.entries({ ...PACKAGES, ...tree })) {
    await mkdir(path.dirname(path.join(root, file)), { recursive: true });
    await writeFile(path.join(root, file), text);
  }
  const result = await cruise(
    ['src', 'workers'].filter((d) => Object.keys(tree).some((f) => f.startsWith(`${d}/`))),
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
  const output = result.output as ICruiseResult;
  return [...new Set(output.summary.violations.map((v) => v.rule.name))].sort();
}

describe('dependency rules (.dependency-cruiser.cjs)', () => {
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

  it('refuse a feature that imports the HTTP edge', async () => {
    expect(
      await violations({
        'src/http/app.ts': 'export const app = 1;',
        'src/billing/invoicing.service.ts': "import { app } from '../http/app.js';\nexport const s = app;",
      }),
    ).to.deep.equal(['edges-are-not-imported']);
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

  it('refuse a provider that imports a feature', async () => {
    expect(
      await violations({
        'src/billing/prices.ts': 'export const p = 1;',
        'src/providers/openai/openai.provider.ts': "import { p } from '../../billing/prices.js';\nexport const o = p;",
      }),
    ).to.deep.equal(['providers-know-no-features']);
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
