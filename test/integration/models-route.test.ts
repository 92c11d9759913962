import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import OpenAI from 'openai';
import { CatalogError } from '../../src/catalog/catalog.js';
import { createContext } from '../../src/context.js';
import { startWebServer } from '../../src/http/server.js';
import { createTestAccount, type TestAccount } from '../support/accounts.js';
import { testConfig } from '../support/env.js';
import { get } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const FREE_IDS = ['gemini-2.5-flash', 'gemini-2.5-flash-lite', 'claude-haiku-4-5'];

describe('GET /v1/models', () => {
  let web: TestWeb;
  let free: TestAccount;
  let paid: TestAccount;

  before(async () => {
    web = await startTestWeb();
    free = await createTestAccount(web.app, { tier: 'free' });
    paid = await createTestAccount(web.app, { tier: 'paid' });
  });
  after(() => web.close());

  it('lists exactly the three free-tier models for a free account, in the OpenAI list shape', async () => {
    const r = await get(`${web.url}/v1/models`, { bearer: free.apiKey });
    expect(r.status).to.equal(200);
    expect(r.body.object).to.equal('list');
    expect(r.body.data.map((m: { id: string }) => m.id))
      .to.have.members(FREE_IDS)
      .and.have.length(3);
    expect(r.body.data.find((m: { id: string }) => m.id === 'claude-haiku-4-5')).to.deep.include({
      id: 'claude-haiku-4-5',
      object: 'model',
      created: 1_735_689_600,
      owned_by: 'anthropic',
    });
  });

  it('says of each model its context length, what it accepts and its prices on each tier (cache reads and writes included), as the catalog has them', async () => {
    const r = await get(`${web.url}/v1/models`, { bearer: paid.apiKey });
    expect(r.body.data.map((m: { id: string }) => m.id)).to.deep.equal(
      web.app.catalog.forTier('paid').map((m) => m.id),
    );
    for (const model of r.body.data) {
      const entry = web.app.catalog.find(model.id)!;
      expect(model, model.id).to.deep.include({
        context_length: entry.context_length,
        input_modalities: entry.input_modalities,
        supports_tools: true,
        reasoning: entry.reasoning ?? false,
        tiers: entry.tiers,
      });
      expect(model.pricing, model.id).to.deep.equal({
        ...(entry.tiers.includes('free')
          ? {
              free: {
                input_price_per_million: '0',
                cached_input_price_per_million: '0',
                cache_write_price_per_million: '0',
                cache_write_1h_price_per_million: '0',
                output_price_per_million: '0',
              },
            }
          : {}),
        paid: {
          input_price_per_million: entry.input_price_per_million,
          cached_input_price_per_million: entry.cached_input_price_per_million,
          cache_write_price_per_million: entry.cache_write_price_per_million,
          cache_write_1h_price_per_million: entry.cache_write_1h_price_per_million,
          output_price_per_million: entry.output_price_per_million,
        },
      });
    }
    expect(r.body.data.find((m: { id: string }) => m.id === 'claude-haiku-4-5')).to.deep.include({
      context_length: 200_000,
      input_modalities: ['text', 'image'],
      pricing: {
        free: {
          input_price_per_million: '0',
          cached_input_price_per_million: '0',
          cache_write_price_per_million: '0',
          cache_write_1h_price_per_million: '0',
          output_price_per_million: '0',
        },
        paid: {
          input_price_per_million: '1.00',
          cached_input_price_per_million: '0.10',
          cache_write_price_per_million: '1.25',
          cache_write_1h_price_per_million: '2.00',
          output_price_per_million: '5.00',
        },
      },
    });
  });

  it("lists the paid tier's models to a free account that asks with ?tier=paid, which still cannot use them", async () => {
    const r = await get(`${web.url}/v1/models?tier=paid`, { bearer: free.apiKey });
    expect(r.status).to.equal(200);
    expect(r.body.data.map((m: { id: string }) => m.id)).to.deep.equal(
      web.app.catalog.forTier('paid').map((m) => m.id),
    );
    expect((await get(`${web.url}/v1/models/gemini-2.5-pro`, { bearer: free.apiKey })).status).to.equal(403);
  });

  it('answers 422 at `tier` for a tier that does not exist', async () => {
    const r = await get(`${web.url}/v1/models?tier=gold`, { bearer: free.apiKey });
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['query', 'tier']);
  });

  it('lists the paid tier: the free models and the larger ones', async () => {
    const r = await get(`${web.url}/v1/models`, { bearer: paid.apiKey });
    expect(r.status).to.equal(200);
    const ids = r.body.data.map((m: { id: string }) => m.id);
    expect(ids).to.include.members([...FREE_IDS, 'gemini-2.5-pro', 'claude-sonnet-4-5', 'gpt-4.1']);
    expect(ids.length).to.be.greaterThan(3);
  });

  it('accepts a JWT as well as an API key', async () => {
    const r = await get(`${web.url}/v1/models`, { bearer: free.jwt });
    expect(r.status).to.equal(200);
    expect(r.body.data).to.have.length(3);
  });

  it('answers 401 without a credential', async () => {
    const r = await get(`${web.url}/v1/models`);
    expect(r.status).to.equal(401);
    expect(r.body.error.type).to.equal('authentication_error');
  });

  it('works with the official openai SDK: models.list() and models.retrieve()', async () => {
    const client = new OpenAI({ apiKey: free.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).to.have.members(FREE_IDS);
    const one = await client.models.retrieve('gemini-2.5-flash');
    expect(one).to.include({ id: 'gemini-2.5-flash', object: 'model', owned_by: 'gemini' });
  });

  it('raises the SDK typed errors for a paid-only model (403) and an unknown one (404)', async () => {
    const client = new OpenAI({ apiKey: free.apiKey, baseURL: `${web.url}/v1`, maxRetries: 0 });
    const forbidden = await client.models.retrieve('claude-sonnet-4-5').catch((e: unknown) => e);
    expect(forbidden).to.be.instanceOf(OpenAI.PermissionDeniedError);
    expect((forbidden as Error).message).to.contain('needs the paid tier');
    const missing = await client.models.retrieve('no-such-model').catch((e: unknown) => e);
    expect(missing).to.be.instanceOf(OpenAI.NotFoundError);
  });

  describe('with MODELS_FILE pointing at another catalog', () => {
    let dir: string;
    let custom: TestWeb;

    before(async () => {
      dir = mkdtempSync(path.join(os.tmpdir(), 'models-route-'));
      const doc = JSON.parse(readFileSync('config/models.json', 'utf8'));
      doc.models.push({
        id: 'house-model',
        provider: 'local',
        upstream_model: 'house',
        tiers: ['paid'],
        input_price_per_million: '0.50',
        output_price_per_million: '0.50',
      });
      const file = path.join(dir, 'models.json');
      writeFileSync(file, JSON.stringify(doc));
      custom = await startTestWeb({ env: { MODELS_FILE: file } });
    });
    after(async () => {
      await custom.close();
      rmSync(dir, { recursive: true, force: true });
    });

    it('refuses to start the web tier on an invalid catalog, naming the file and the field', async () => {
      const file = path.join(dir, 'bad.json');
      const doc = JSON.parse(readFileSync('config/models.json', 'utf8'));
      doc.models[0].output_price_per_million = 2.5;
      writeFileSync(file, JSON.stringify(doc));
      const app = createContext(testConfig({ MODELS_FILE: file }), { role: 'web' });
      try {
        const err = await startWebServer(app).then(
          (running) => running.stop().then(() => undefined),
          (e: unknown) => e,
        );
        expect(err).to.be.instanceOf(CatalogError);
        expect((err as Error).message)
          .to.contain(file)
          .and.contain('models[0].output_price_per_million (model "gemini-2.5-flash")');
      } finally {
        await app.close();
      }
    });

    it("serves that catalog's models", async () => {
      const account = await createTestAccount(custom.app, { tier: 'paid' });
      const r = await get(`${custom.url}/v1/models`, { bearer: account.apiKey });
      expect(r.body.data.map((m: { id: string }) => m.id)).to.include('house-model');
    });
  });
});
