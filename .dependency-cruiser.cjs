// Which layer may import which (README, "Dependency rules"), checked on every `npm test`.
// Paths are relative to the repository root; only the service's own code is checked (tests may
// import anything).
const FEATURES =
  '^src/(accounts|account-closing|console-identity|billing|catalog|chat|health|limits|responses|scheduler|subscriptions|usage)/';
const CONTEXT = '^src/(context|lifecycle|metrics-server)[.]ts$';
const CORE =
  '^src/(calendar|clock|config|email-address|errors|ids|local-secret|logger|metrics|scheduled-job|validation)[.]ts$|^db/';
// The provider list and each provider's plug-in (name and settings schema): config.ts reads them.
const PLUGINS = '^src/providers/(providers|plugin)[.]ts$|^src/providers/[^/]+/[^/]+[.]plugin[.]ts$';
// Tests beside the code may import anything.
const TESTS = '[.]test[.]ts$';

// The layers under the process context and the edges, lowest first. A module imports its own
// room and the rooms of lower layers; the rooms of one layer do not import each other. Above
// them: the process context (CONTEXT), then the edges (src/http, workers, scripts), by the rules below.
const LAYERS = [
  { core: CORE },
  { infra: '^src/infra/', providers: '^src/providers/' },
  { catalog: '^src/catalog/' },
  { usage: '^src/usage/' },
  { limits: '^src/limits/' },
  { accounts: '^src/accounts/' },
  // The console's sign-in and sessions: above the accounts they sign in to.
  { 'console-identity': '^src/console-identity/' },
  { billing: '^src/billing/' },
  { subscriptions: '^src/subscriptions/' },
  { chat: '^src/chat/' },
  // The Responses API: a second wire format over chat's engine, and the responses it stores.
  { responses: '^src/responses/' },
  // Closing an account: settles it with billing and subscriptions, then erases what every room kept.
  { 'account-closing': '^src/account-closing/' },
  { health: '^src/health/', scheduler: '^src/scheduler/' },
];

/** One rule per room: nothing from a higher layer, nor from another room of its own layer. */
const layerRules = LAYERS.flatMap((layer, i) =>
  Object.entries(layer).map(([room, path]) => {
    const siblings = Object.entries(layer).filter(([other]) => other !== room);
    const higher = LAYERS.slice(i + 1).flatMap((l) => Object.values(l));
    return {
      name: `${room}-imports-only-lower-layers`,
      comment: `${room} imports only itself and the layers below it (README, "Dependency rules"); type-only imports included.`,
      severity: 'error',
      from: { path, pathNot: TESTS },
      // config.ts reads every provider's settings schema through the plug-in list (kept light below).
      to: {
        path: [...siblings.map(([, p]) => p), ...higher].join('|'),
        ...(room === 'core' ? { pathNot: PLUGINS } : {}),
      },
    };
  }),
);

// Every module of src/ is in one room: a layer's, the process context's or the HTTP edge's (and
// src/types holds declarations only). A module in none would escape every layer rule above.
const ROOMS = [...LAYERS.flatMap((l) => Object.values(l)), CONTEXT, '^src/http/', '^src/types/'].join('|');

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: 'web-side-and-worker-side-meet-at-the-relay',
      comment:
        "A completion's web side (src/chat/request, and the HTTP edge) and its worker side (src/chat/job, and workers/) import each other only through what both share: src/chat/relay (the job's data, the relay's protocol) and src/chat/stream (the answer's shapes).",
      severity: 'error',
      from: { path: '^src/chat/request/|^src/http/', pathNot: TESTS },
      to: { path: '^src/chat/job/' },
    },
    {
      name: 'worker-side-does-not-import-the-web-side',
      comment: 'See web-side-and-worker-side-meet-at-the-relay.',
      severity: 'error',
      from: { path: '^src/chat/job/|^workers/', pathNot: TESTS },
      to: { path: '^src/chat/request/' },
    },
    {
      name: 'relay-and-stream-are-shared-by-both-sides',
      comment:
        'src/chat/relay and src/chat/stream are what the web side and the worker side share, so they import neither side.',
      severity: 'error',
      from: { path: '^src/chat/(relay|stream)/', pathNot: TESTS },
      to: { path: '^src/chat/(request|job)/' },
    },
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
        "Routes, workers and scripts call a feature's service; the service decides what to read and write (types may be shared).",
      severity: 'error',
      from: { path: '^(src/http|workers|scripts)/' },
      to: { path: '[.]repository[.]ts$', dependencyTypesNot: ['type-only'] },
    },
    {
      name: 'features-call-services-not-repositories',
      comment: "A feature calls another feature's service, never its repository (CONVENTIONS.md); types may be shared.",
      severity: 'error',
      from: { path: FEATURES, pathNot: TESTS },
      to: { path: '[.]repository[.]ts$', pathNot: '^src/$1/', dependencyTypesNot: ['type-only'] },
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
    {
      name: 'console-is-not-imported',
      comment:
        'The console (console/) is a browser app the build bundles on its own: the service serves its built files, never imports it.',
      severity: 'error',
      from: { path: '^(src|workers|db|scripts)/' },
      to: { path: '^console/' },
    },
    {
      name: 'console-imports-no-service-code',
      comment:
        'The console talks to the service over HTTP only, like any frontend: no module of the service in the bundle.',
      severity: 'error',
      from: { path: '^console/' },
      to: { path: '^(src|workers|db|scripts|test|bench)/' },
    },
    {
      name: 'every-module-in-a-room',
      comment:
        'A module of src/ outside every room (LAYERS, the process context, src/http) is unchecked by the layer rules: add it to a room.',
      severity: 'error',
      from: { path: '^src/', pathNot: `${ROOMS}|${TESTS}` },
      to: {},
    },
    {
      name: 'imports-only-modules-in-a-room',
      comment: 'Importing a module of src/ that is in no room: add it to one (see every-module-in-a-room).',
      severity: 'error',
      from: { path: '^(src|workers|scripts)/' },
      to: { path: '^src/', pathNot: ROOMS },
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
