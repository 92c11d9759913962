import { expect } from 'chai';
import fc from 'fast-check';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { isolatedPrefix } from '../support/env.js';
import { post, type HttpResult } from '../support/http.js';
import { schemaBeyondOneLimit, schemaWithinLimits, type Schema } from '../support/json-schema-arbitraries.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Property-based tests of the limits on the JSON Schemas clients send (docs/limits.md), as a
// strict json_schema and as a tool's parameters: a schema within them is admitted, one beyond
// exactly one of them is a 422 at its place. The seed is fixed so CI is repeatable; FC_SEED=<n>
// (or FC_RUNS=<n>) explores further.
const SEED = Number(process.env.FC_SEED ?? 20_261_128);
const RUNS = Number(process.env.FC_RUNS ?? 25);
const params = { seed: SEED, numRuns: RUNS };

const FORMS = {
  response_format: {
    field: ['body', 'response_format', 'json_schema', 'schema'],
    body: (schema: Schema) => ({
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } },
    }),
  },
  tool: {
    field: ['body', 'tools', 1, 'function', 'parameters'],
    body: (schema: Schema) => ({
      tools: [
        { type: 'function', function: { name: 'other' } },
        { type: 'function', function: { name: 'fill', parameters: schema } },
      ],
      tool_choice: { type: 'function', function: { name: 'fill' } },
    }),
  },
};

describe('client JSON Schemas at admission, with generated schemas (fast-check)', function () {
  this.timeout(300_000);
  let web: TestWeb;
  let paid: TestAccount;

  before(async () => {
    web = await startTestWeb({
      env: {
        REDIS_PREFIX: isolatedPrefix(),
        // No worker runs here: an admitted completion is queued, then refused for want of a worker.
        QUEUE_PICKUP_TIMEOUT_MS: '100',
        PAID_REQUESTS_PER_MINUTE: '1000000',
        PAID_REQUESTS_PER_HOUR: '1000000',
        PAID_REQUESTS_PER_DAY: '1000000',
        PAID_TOKENS_PER_DAY: '1000000000',
      },
    });
    paid = await createTestAccount(web.app, { tier: 'paid' });
  });
  after(async () => {
    await web.close();
  });

  const send = (body: Record<string, unknown>): Promise<HttpResult> =>
    post(
      `${web.url}/v1/chat/completions`,
      { model: 'gpt-4.1-mini', messages: [{ role: 'user', content: 'Fill in the form' }], ...body },
      { bearer: paid.apiKey },
    );
  const shown = (schema: Schema, r: HttpResult) =>
    `${JSON.stringify(schema).slice(0, 400)} -> ${r.status} ${r.text.slice(0, 400)}`;

  for (const [form, how] of Object.entries(FORMS)) {
    it(`admits every schema within the limits as ${form} (queued, never a 422 or a 500)`, async () => {
      await fc.assert(
        fc.asyncProperty(schemaWithinLimits, async (schema) => {
          const r = await send(how.body(schema));
          expect(r.status === 503 && r.body?.error?.code === 'no_worker_available', shown(schema, r)).to.equal(true);
        }),
        params,
      );
    });

    it(`refuses every schema beyond one limit as ${form} with a 422 at its place in the schema`, async () => {
      await fc.assert(
        fc.asyncProperty(schemaBeyondOneLimit, async ({ schema, at }) => {
          const r = await send(how.body(schema));
          expect(r.status, shown(schema, r)).to.equal(422);
          expect(
            r.body.detail.map((d: { loc: unknown }) => JSON.stringify(d.loc)),
            shown(schema, r),
          ).to.include(JSON.stringify([...how.field, ...at]));
        }),
        params,
      );
    });
  }
});
