import { expect } from 'chai';
import fc from 'fast-check';
import { allRoutes } from '../../src/http/routes/index.js';
import type { RouteSpec } from '../../src/http/route.js';
import { closeOutboxFor, createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { request, type HttpResult } from '../support/http.js';
import { invalidOf, validOf, type GenOptions } from '../support/schema-arbitraries.js';
import { ContentPartSchema, ToolCallSchema, ToolSchema } from '../../src/chat/request/chat.schema.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Property-based tests of every endpoint that takes a body, a query string or path parameters,
// generated from the same JSON Schemas the web tier validates with: valid input is accepted,
// invalid input is a 422 pointing at the field, and nothing at all is ever a 500.
// The seed is fixed so CI is repeatable; FC_SEED=<n> (or FC_RUNS=<n>) explores further.
const SEED = Number(process.env.FC_SEED ?? 20_261_123);
const RUNS = Number(process.env.FC_RUNS ?? 25);
const params = { seed: SEED, numRuns: RUNS };

const ROLES = ['system', 'developer', 'user', 'assistant'];
const PNG = 'data:image/png;base64,iVBORw0KGgo=';

/** A chat message as the rules after validation accept it (src/chat/request/request-forms.ts). */
function messageArbitrary(): fc.Arbitrary<unknown> {
  const text = fc.string({ maxLength: 200 });
  const part = validOf(ContentPartSchema, {
    maxStringLength: 200,
    overrides: { 'image_url.url': fc.constantFrom(PNG, 'https://example.com/cat.png') },
  });
  const textPart = validOf(ContentPartSchema, { maxStringLength: 200 }).filter(
    (p) => (p as { type: string }).type === 'text',
  );
  return fc.oneof(
    fc.record({ role: fc.constantFrom(...ROLES), content: text }),
    fc.record({ role: fc.constantFrom(...ROLES), content: fc.array(textPart, { maxLength: 3 }) }),
    fc.record({ role: fc.constant('user'), content: fc.array(part, { maxLength: 3 }) }),
    fc.record({
      role: fc.constant('assistant'),
      content: fc.option(text),
      tool_calls: fc.array(validOf(ToolCallSchema, { maxStringLength: 100 }), { minLength: 1, maxLength: 3 }),
    }),
  );
}

/** A Responses API input item the translation takes: a message of any role, as text or text parts. */
function responsesItemArbitrary(): fc.Arbitrary<unknown> {
  const text = fc.string({ maxLength: 200 });
  const parts = (type: string) =>
    fc.array(fc.record({ type: fc.constant(type), text }), { minLength: 1, maxLength: 3 });
  return fc.oneof(
    fc.record({ role: fc.constantFrom(...ROLES), content: text }),
    fc.record({
      type: fc.constant('message'),
      role: fc.constantFrom('system', 'developer', 'user'),
      content: parts('input_text'),
    }),
    fc.record({ type: fc.constant('message'), role: fc.constant('assistant'), content: parts('output_text') }),
  );
}

/** A function tool in the Responses API's flat shape. */
const responsesToolArbitrary = fc.record({
  type: fc.constant('function'),
  name: fc.stringMatching(/^[a-zA-Z0-9_-]{1,64}$/),
  description: fc.option(fc.string({ maxLength: 100 })),
  parameters: fc.constant({ type: 'object', properties: { q: { type: 'string' } } }),
});

describe('every endpoint, with generated input (fast-check)', function () {
  this.timeout(120_000);
  let web: TestWeb;
  let paid: TestAccount;
  let patchedKeyId: string;
  const signups: string[] = [];

  before(async () => {
    web = await startTestWeb({
      env: {
        REDIS_PREFIX: isolatedPrefix(),
        // No worker runs here: a valid completion is queued, then refused for want of a worker.
        QUEUE_PICKUP_TIMEOUT_MS: '100',
        PAID_REQUESTS_PER_MINUTE: '1000000',
        PAID_REQUESTS_PER_HOUR: '1000000',
        PAID_REQUESTS_PER_DAY: '1000000',
        PAID_TOKENS_PER_DAY: '1000000000',
        COMPLETION_READS_PER_MINUTE: '1000000',
      },
    });
    paid = await createTestAccount(web.app, { tier: 'paid' });
    // The key the generated PATCH bodies change (not the account's default key, which the others use).
    const created = await request('POST', `${web.url}/v1/keys`, { bearer: paid.jwt, json: { name: 'Patched' } });
    patchedKeyId = created.body.id;
  });
  after(async () => {
    await closeOutboxFor(web.app, signups);
    await web.close();
  });

  interface Case {
    spec: RouteSpec;
    /** Generator options for valid values that must also pass the checks after validation. */
    gen: GenOptions;
    /** What a valid request is answered with once it passed validation. */
    accepted: (r: HttpResult) => boolean;
  }

  const personas = () => Object.keys(web.app.catalog.personas);
  const keyOverrides = () => ({
    'models.*': fc.constantFrom(...web.app.catalog.models.map((m) => m.id)),
    'limits.monthly_spend_limit_usd': fc.option(
      fc.integer({ min: 1, max: 100_000_000 }).map((c) => (c / 100).toFixed(2)),
    ),
    expires_at: fc.option(
      fc
        .integer({ min: 60_000, max: 400 * 86_400_000 })
        .map((ms) => new Date(web.app.clock.now().getTime() + ms).toISOString()),
    ),
  });
  const cases = (): Case[] => {
    const byPath = new Map(allRoutes(() => ({})).map((r) => [`${r.method} ${r.path}`, r]));
    const route = (key: string) => byPath.get(key) ?? expect.fail(`no route ${key}`);
    // Billing is not configured here: the Stripe-bound endpoints refuse with 503 once validation passed
    // (or answer from the account alone, as an upgrade of a paid account does).
    const stripeDown = (r: HttpResult) =>
      r.status === 200 || (r.status === 503 && r.body?.error?.code === 'billing_not_configured');
    return [
      {
        spec: route('post /v1/chat/completions'),
        gen: {
          maxStringLength: 200,
          overrides: {
            model: fc.constant('gpt-4.1-mini'),
            persona: fc.option(fc.constantFrom(...personas())),
            // A message valid beyond its schema: content as its role may carry it, tool calls only from
            // the assistant (a tool message, which must answer an earlier call, is tested in chat-tools).
            'messages.*': messageArbitrary(),
            // Names unique, as a request's tools must be; tool_choice naming one is tested in chat-tools.
            tools: fc.option(
              fc.uniqueArray(validOf(ToolSchema, { maxStringLength: 50 }), {
                selector: (t) => (t as { function: { name: string } }).function.name,
                maxLength: 4,
              }),
            ),
            tool_choice: fc.option(fc.constantFrom('none', 'auto')),
            // With max_tokens, it must agree (tested in chat-tools).
            max_completion_tokens: fc.constant(null),
            logit_bias: fc.option(
              fc.dictionary(fc.nat(200_000).map(String), fc.integer({ min: -100, max: 100 }), { maxKeys: 5 }),
            ),
            // resumable: true needs stream: true, a rule across two fields (test/e2e/chat-resume.test.ts).
            'stream_options.resumable': fc.constantFrom(null, false),
          },
        },
        // Queued, then refused because no worker took it: every check before the queue passed.
        accepted: (r) => r.status === 503 && r.body?.error?.code === 'no_worker_available',
      },
      {
        spec: route('post /v1/responses'),
        gen: {
          maxStringLength: 200,
          overrides: {
            model: fc.constant('gpt-4.1-mini'),
            'input.*': responsesItemArbitrary(),
            tools: fc.option(fc.uniqueArray(responsesToolArbitrary, { selector: (t) => t.name, maxLength: 4 })),
            tool_choice: fc.option(fc.constantFrom('none', 'auto')),
            // json_object needs the word JSON in a message, json_schema a schema: both tested in responses-api.
            text: fc.option(fc.record({ format: fc.record({ type: fc.constant('text') }) })),
            // A background request is answered queued at once, without the no-worker refusal the
            // others end with (tested in responses-background).
            background: fc.constantFrom(null, false),
          },
        },
        // Queued, then refused because no worker took it; or a previous_response_id the account has
        // no stored response with (it has none).
        accepted: (r) =>
          (r.status === 503 && r.body?.error?.code === 'no_worker_available') ||
          (r.status === 404 && r.body?.error?.param === 'previous_response_id'),
      },
      // No response has these ids: every valid one is looked up and not found.
      ...[
        'get /v1/responses/:response_id',
        'get /v1/responses/:response_id/input_items',
        'delete /v1/responses/:response_id',
        'post /v1/responses/:response_id/cancel',
      ].map((key) => ({
        spec: route(key),
        gen: {
          query: true,
          overrides: { response_id: fc.stringMatching(/^[\w-]{1,64}$/), starting_after: fc.nat().map(String) },
        },
        accepted: (r: HttpResult) => r.status === 404 && r.body?.error?.param === 'response_id',
      })),
      { spec: route('post /v1/auth/signup'), gen: {}, accepted: (r) => r.status === 200 },
      {
        spec: route('get /v1/auth/verify'),
        gen: { query: true },
        // No Accept header: the page a person opening the link sees (JSON only for a client asking for it).
        accepted: (r) => r.status === 400 && /This link is not valid/.test(r.text),
      },
      // A browser's POST from the console's own pages (send() adds the same-origin Origin).
      {
        spec: route('post /v1/auth/verify'),
        gen: {},
        accepted: (r) => r.status === 400 && r.body?.error?.code === 'invalid_token',
      },
      {
        spec: route('post /console/sign-in'),
        gen: { overrides: { return_to: fc.constantFrom('/console/', '/console/usage?range=30d') } },
        accepted: (r) => r.status === 202,
      },
      {
        spec: route('get /console/sign-in/confirm'),
        gen: { query: true },
        accepted: (r) => r.status === 400 && /not valid/.test(r.text),
      },
      {
        spec: route('post /console/sign-in/confirm'),
        gen: {},
        accepted: (r) => r.status === 400 && r.body?.error?.code === 'invalid_token',
      },
      {
        spec: route('get /v1/billing/history'),
        gen: { query: true },
        accepted: (r) =>
          r.status === 200 ||
          (r.status === 422 && /must be on or after start_date|at most/.test(JSON.stringify(r.body))),
      },
      {
        spec: route('get /v1/billing/usage/daily'),
        gen: { query: true },
        accepted: (r) =>
          r.status === 200 ||
          (r.status === 422 && /must be on or after start_date|at most 366 days/.test(JSON.stringify(r.body))),
      },
      {
        spec: route('get /v1/billing/requests'),
        gen: { query: true, overrides: { limit: fc.integer({ min: 1, max: 100 }).map(String) } },
        // The account has no requests: any valid cursor is one it does not have.
        accepted: (r) =>
          (r.status === 200 && Array.isArray(r.body?.data)) ||
          (r.status === 404 && r.body?.error?.code === 'request_not_found'),
      },
      { spec: route('post /v1/subscription/confirm-upgrade'), gen: { query: true }, accepted: stripeDown },
      { spec: route('post /v1/subscription/confirm-payment-update'), gen: { query: true }, accepted: stripeDown },
      { spec: route('get /v1/subscription/upgrade-success'), gen: { query: true }, accepted: stripeDown },
      { spec: route('get /v1/subscription/payment-method-success'), gen: { query: true }, accepted: stripeDown },
      { spec: route('get /v1/models'), gen: { query: true }, accepted: (r) => r.status === 200 },
      {
        spec: route('get /v1/models/:model'),
        gen: {},
        accepted: (r) => r.status === 404 || r.status === 200 || r.status === 403,
      },
      {
        spec: route('put /v1/billing/spend-limit'),
        // Whole cents from 0.01 to 1,000,000.00, in every form the pattern allows for them ("7.50", "7.5"; "7.00", "7.0", "7").
        gen: {
          overrides: {
            monthly_limit_usd: fc.integer({ min: 1, max: 100_000_000 }).chain((cents) => {
              const whole = Math.floor(cents / 100);
              const fraction = String(cents % 100).padStart(2, '0');
              const forms = [`${whole}.${fraction}`];
              if (fraction.endsWith('0')) forms.push(`${whole}.${fraction[0]}`);
              if (fraction === '00') forms.push(String(whole));
              return fc.constantFrom(...forms);
            }),
          },
        },
        accepted: (r) => r.status === 200,
      },
      // A typed address other than the account's passes validation and is refused by the feature, at
      // the same field, before anything is closed.
      {
        spec: route('post /v1/account/close'),
        gen: { maxStringLength: 100 },
        accepted: (r) =>
          r.status === 422 &&
          JSON.stringify(r.body?.detail?.[0]?.loc) === '["body","confirm_email"]' &&
          /to confirm closing it/.test(r.body.detail[0].msg),
      },
      // Keys: models from the catalog, a spending limit of whole cents, an expiry in the future.
      // The account's keys pile up over the runs, so the cap on keys (409) counts as accepted too.
      ...['post /v1/keys', 'patch /v1/keys/:id'].map((key) => ({
        spec: route(key),
        gen: { maxStringLength: 100, overrides: keyOverrides() },
        accepted: (r: HttpResult) =>
          r.status === 201 ||
          r.status === 200 ||
          (r.status === 409 && r.body?.error?.code === 'key_limit_reached') ||
          // No key has the generated ids.
          (r.status === 404 && r.body?.error?.code === 'key_not_found'),
      })),
      {
        spec: route('delete /v1/keys/:id'),
        gen: {},
        accepted: (r) => r.status === 404 && r.body?.error?.code === 'key_not_found',
      },
      // No completion has these ids: every valid one is looked up and not found. (An empty id is
      // another URL, the one that creates completions.)
      {
        spec: route('get /v1/chat/completions/:completion_id'),
        gen: { overrides: { completion_id: fc.stringMatching(/^[\w-]{1,64}$/) } },
        accepted: (r) => r.status === 404 && r.body?.error?.code === 'completion_not_found',
      },
      {
        spec: route('get /v1/chat/completions/:completion_id/stream'),
        gen: {
          query: true,
          overrides: { completion_id: fc.stringMatching(/^[\w-]{1,64}$/), starting_after: fc.nat().map(String) },
        },
        accepted: (r) => r.status === 404 && r.body?.error?.code === 'completion_not_found',
      },
    ];
  };

  const bearerFor = (spec: RouteSpec) =>
    spec.auth === 'none' ? undefined : spec.auth === 'jwt' ? paid.jwt : paid.apiKey;

  /** Sends `value` where the route reads it: the JSON body, the query string, or the path. */
  function send(spec: RouteSpec, where: 'body' | 'query' | 'path', value: unknown): Promise<HttpResult> {
    const bearer = bearerFor(spec);
    // A body or query string goes to an existing key; generated ids are tried with the path.
    let path = where === 'path' ? spec.path : spec.path.replace(':id', patchedKeyId);
    if (where === 'path') {
      for (const [k, v] of Object.entries(value as Record<string, unknown>))
        path = path.replace(`:${k}`, encodeURIComponent(String(v)));
      return request(spec.method.toUpperCase(), `${web.url}${path}`, { bearer });
    }
    if (where === 'query') {
      const qs = new URLSearchParams();
      for (const [k, v] of Object.entries((value ?? {}) as Record<string, unknown>)) {
        for (const one of Array.isArray(v) ? v : [v]) qs.append(k, String(one));
      }
      return request(spec.method.toUpperCase(), `${web.url}${path}?${qs.toString()}`, { bearer });
    }
    const sent = request(spec.method.toUpperCase(), `${web.url}${path}`, {
      bearer,
      raw: JSON.stringify(value),
      headers: { 'content-type': 'application/json', ...(spec.sameOrigin ? { origin: web.url } : {}) },
    });
    // Accepted sign-ups queued an email: closed after the test, so no later worker sends it.
    if (spec.path === '/v1/auth/signup') void sent.then((r) => r.status === 200 && signups.push(r.body.email));
    if (spec.path === '/console/sign-in')
      void sent.then((r) => r.status === 202 && signups.push((value as { email: string }).email));
    return sent;
  }

  const sources = (spec: RouteSpec) =>
    [
      ['body', spec.body],
      ['query', spec.query],
      ['path', spec.params],
    ].filter(([, s]) => s !== undefined) as ['body' | 'query' | 'path', Record<string, unknown>][];

  const describeResult = (r: HttpResult) => `${r.status} ${r.text.slice(0, 300)}`;

  it('has a case for every endpoint that takes a body, a query string or path parameters', () => {
    const covered = new Set(cases().map((c) => `${c.spec.method} ${c.spec.path}`));
    const missing = allRoutes(() => ({}))
      // Hidden routes (the docs page's assets) are not part of the API.
      .filter((r) => !r.hidden && sources(r).length > 0)
      .map((r) => `${r.method} ${r.path}`)
      .filter((k) => !covered.has(k));
    expect(missing, 'add a case above for each of these').to.deep.equal([]);
  });

  it('accepts every valid request, past validation to the feature behind it', async () => {
    for (const c of cases()) {
      for (const [where, schema] of sources(c.spec)) {
        const gen = where === 'path' ? { ...c.gen, query: true } : c.gen;
        await fc.assert(
          fc.asyncProperty(validOf(schema, gen), async (value) => {
            const r = await send(c.spec, where, value);
            expect(
              c.accepted(r),
              `${c.spec.method} ${c.spec.path} ${where} ${JSON.stringify(value).slice(0, 300)} -> ${describeResult(r)}`,
            ).to.equal(true);
          }),
          params,
        );
      }
    }
  });

  it('answers every invalid request with 422 pointing at the field that is wrong', async () => {
    for (const c of cases()) {
      for (const [where, schema] of sources(c.spec)) {
        const gen = where === 'path' ? { ...c.gen, query: true } : c.gen;
        await fc.assert(
          fc.asyncProperty(invalidOf(schema, gen), async ({ value, loc }) => {
            // A path parameter cannot be left out, repeated or empty; those cases are other URLs.
            if (where === 'path') {
              const v = (value as Record<string, unknown> | null)?.[String(loc[0])];
              if (v === undefined || Array.isArray(v) || v === '') return;
            }
            const r = await send(c.spec, where, value);
            const what = `${c.spec.method} ${c.spec.path} ${where} ${JSON.stringify(value).slice(0, 300)} expecting loc ${JSON.stringify([where, ...loc])} -> ${describeResult(r)}`;
            expect(r.status, what).to.equal(422);
            expect(
              r.body.detail.map((d: { loc: unknown }) => JSON.stringify(d.loc)),
              what,
            ).to.include(JSON.stringify([where, ...loc]));
            expect(r.body.error.type, what).to.equal('invalid_request_error');
          }),
          params,
        );
      }
    }
  });

  it('never answers 500, whatever JSON a body holds', async () => {
    for (const c of cases().filter((x) => x.spec.body)) {
      await fc.assert(
        fc.asyncProperty(fc.jsonValue(), async (value) => {
          const r = await send(c.spec, 'body', value);
          expect(r.status, `${c.spec.path} ${JSON.stringify(value).slice(0, 200)} -> ${describeResult(r)}`).to.be.oneOf(
            [200, 400, 403, 404, 422, 429, 503],
          );
        }),
        params,
      );
    }
  });

  it('never answers 500, whatever a query string or an Authorization header holds', async () => {
    const text = fc.string({ unit: 'binary', maxLength: 40 });
    for (const c of cases()) {
      await fc.assert(
        fc.asyncProperty(
          fc.dictionary(
            fc.constantFrom(
              'token',
              'start_date',
              'end_date',
              'session_id',
              'setup_intent_id',
              'limit',
              'starting_after',
              'group_by',
              'x',
            ),
            text,
            { maxKeys: 3 },
          ),
          fc.string({ unit: 'grapheme-ascii', maxLength: 80 }),
          async (query, auth) => {
            const qs = new URLSearchParams(query);
            const r = await request(
              c.spec.method.toUpperCase(),
              `${web.url}${c.spec.path.replace(':model', 'gpt-4.1-mini')}?${qs.toString()}`,
              { headers: { authorization: auth } },
            );
            expect(
              r.status,
              `${c.spec.path}?${qs.toString()} with Authorization ${JSON.stringify(auth)} -> ${describeResult(r)}`,
            ).to.be.oneOf([200, 400, 401, 403, 404, 422, 503]);
            expect(r.headers.get('content-type') ?? '', describeResult(r)).to.match(/json|html/);
          },
        ),
        params,
      );
    }
  });

  it('refuses a query value that is not UTF-8 once percent-decoded, instead of altering it', async () => {
    const r = await request('GET', `${web.url}/v1/auth/verify?token=abc%FFdef`);
    expect(r.status).to.equal(422);
    expect(r.body.detail[0]).to.deep.equal({
      loc: ['query', 'token'],
      msg: 'Value is not valid UTF-8 once percent-decoded',
      type: 'string_unicode',
    });
  });
});
