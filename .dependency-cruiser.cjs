// Which layer may import which (README, "Dependency rules"), checked on every `npm test`.
// Paths are relative to the repository root; only the service's own code is checked (tests may
// import anything).
const FEATURES = '^src/(accounts|billing|catalog|chat|health|limits|scheduler|subscriptions|usage)/';
const CONTEXT = '^src/(context|lifecycle|metrics-server)[.]ts$';
const CORE = '^src/(config|clock|errors|logger|metrics|validation)[.]ts$';
// The provider list and each provider's plug-in (name and settings schema): config.ts reads them.
const PLUGINS = '^src/providers/(providers|plugin)[.]ts$|^src/providers/[^/]+/[^/]+[.]plugin[.]ts$';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'edges-are-not-imported',
      comment: 'src/http and workers are the two edges: nothing imports them (but themselves and the tests).',
      severity: 'error',
      from: { path: '^(src|db|scripts|bench)/', pathNot: '^src/http/' },
      to: { path: '^(src/http|workers)/' },
    },
    {
      name: 'workers-import-no-http',
      severity: 'error',
      from: { path: '^workers/' },
      to: { path: '^src/http/' },
    },
    {
      name: 'features-do-not-see-the-context',
      comment:
        'Features, providers, infra and the core take narrow inputs; only the edges and scripts see the process context.',
      severity: 'error',
      from: { path: `${FEATURES}|^src/(providers|infra)/|${CORE}|^db/` },
      to: { path: CONTEXT },
    },
    {
      name: 'only-http-knows-koa',
      severity: 'error',
      from: { path: '^(src|workers|db|scripts)/', pathNot: '^src/http/' },
      to: { path: 'node_modules/(koa|koa-body|@koa/[^/]+)/' },
    },
    {
      name: 'only-infra-queues-knows-bullmq',
      comment: 'Queues and workers come from the one queue factory (src/infra/queues.ts).',
      severity: 'error',
      from: { path: '^(src|workers|db|scripts)/', pathNot: '^src/infra/queues[.]ts$' },
      to: { path: 'node_modules/bullmq/' },
    },
    {
      name: 'providers-know-no-features',
      comment:
        'A provider takes an OpenAI-shaped request and yields chunks; it knows nothing of accounts, billing or the rest.',
      severity: 'error',
      from: { path: '^src/providers/', pathNot: '[.]test[.]ts$' },
      to: { path: `${FEATURES}|^src/(http|infra)/|^workers/` },
    },
    {
      name: 'infra-and-core-stay-low',
      comment:
        "One file per outside system and the shared core: they import neither features nor providers (config.ts only the plug-ins' settings).",
      severity: 'error',
      from: { path: `^src/infra/|${CORE}` },
      to: { path: `${FEATURES}|^src/providers/`, pathNot: PLUGINS },
    },
    {
      name: 'provider-plug-ins-stay-light',
      comment:
        "config.ts reads every provider's settings through the plug-in list, so the list and the plug-ins load nothing else: adapters and their SDKs come by dynamic import, with the registry.",
      severity: 'error',
      from: { path: PLUGINS },
      to: { pathNot: PLUGINS, dependencyTypesNot: ['dynamic-import', 'type-only'] },
    },
    {
      name: 'edges-call-services-not-repositories',
      comment:
        "Routes and workers call a feature's service; the service decides what to read and write (types may be shared).",
      severity: 'error',
      from: { path: '^(src/http|workers)/' },
      to: { path: '[.]repository[.]ts$', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'only-repositories-write-sql',
      comment: "SQL (kysely's sql template) is written in repositories, the database module and migrations only.",
      severity: 'error',
      from: { path: '^(src|workers|scripts)/', pathNot: '([.]repository[.]ts|^src/infra/db[.]ts)$' },
      to: { path: 'node_modules/kysely/', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'migrations-import-only-kysely',
      severity: 'error',
      from: { path: '^db/migrations/' },
      to: { pathNot: '^db/migrations/|node_modules/kysely/' },
    },
    {
      name: 'no-test-code-in-the-service',
      comment: 'Fakes and tests live beside the code they test but are never imported by it.',
      severity: 'error',
      from: { path: '^(src|workers|db|scripts)/', pathNot: '([.]test|[.]fake)[.]ts$|/testing/' },
      to: { path: '^test/|([.]test|[.]fake)[.]ts$|/testing/' },
    },
    { name: 'no-cycles', severity: 'error', from: {}, to: { circular: true } },
  ],
  options: {
    doNotFollow: { path: 'node_modules' },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    exclude: { path: '^(dist|var)/' },
  },
};
