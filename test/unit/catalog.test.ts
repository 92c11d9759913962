import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { CatalogError, loadCatalog, parseCatalog, priceMicros, type CatalogModel } from '../../src/catalog/catalog.js';

const DEFAULT_FILE = 'config/models.json';

interface Doc {
  models: Partial<CatalogModel>[] & Record<string, unknown>[];
  personas: Record<string, string>;
}

/** A fresh copy of the shipped catalog to break in one place. */
function shipped(): Doc {
  return JSON.parse(readFileSync(DEFAULT_FILE, 'utf8')) as Doc;
}

function problemsOf(doc: unknown): string {
  try {
    parseCatalog(doc, 'test-models.json');
  } catch (err) {
    expect(err).to.be.instanceOf(CatalogError);
    return (err as Error).message;
  }
  throw new Error('expected the catalog to be rejected');
}

describe('model catalog', () => {
  it('loads the shipped catalog with exactly the three free-tier models', () => {
    const catalog = loadCatalog(DEFAULT_FILE);
    expect(catalog.forTier('free').map((m) => m.id)).to.have.members([
      'gemini-2.5-flash',
      'gemini-2.5-flash-lite',
      'claude-haiku-4-5',
    ]);
  });

  it('offers every free model on the paid tier, plus a larger Gemini, a larger Claude and an OpenAI model', () => {
    const paid = loadCatalog(DEFAULT_FILE).forTier('paid');
    const ids = paid.map((m) => m.id);
    expect(ids).to.include.members([
      'gemini-2.5-flash',
      'gemini-2.5-flash-lite',
      'claude-haiku-4-5',
      'gemini-2.5-pro',
      'claude-sonnet-4-5',
    ]);
    expect(paid.some((m) => m.provider === 'openai')).to.equal(true);
  });

  it('keeps prices as exact decimal strings with the cheapest at exactly 0.30', () => {
    const catalog = loadCatalog(DEFAULT_FILE);
    const prices = catalog.models.flatMap((m) => [m.input_price_per_million, m.output_price_per_million]);
    for (const p of prices)
      expect(p)
        .to.be.a('string')
        .and.match(/^\d+(\.\d{1,6})?$/);
    const cheapest = prices.map(priceMicros).reduce((a, b) => (b < a ? b : a));
    expect(cheapest).to.equal(300_000n);
  });

  it('records the published price where the 0.30 floor raised it', () => {
    const lite = loadCatalog(DEFAULT_FILE).find('gemini-2.5-flash-lite');
    expect(lite?.input_price_per_million).to.equal('0.30');
    expect(lite?.published_input_price_per_million).to.equal('0.10');
  });

  it('finds a model by id and answers undefined for an unknown one', () => {
    const catalog = loadCatalog(DEFAULT_FILE);
    expect(catalog.find('claude-haiku-4-5')?.provider).to.equal('anthropic');
    expect(catalog.find('no-such-model')).to.equal(undefined);
  });

  it('looks up personas by name, never through inherited object properties', () => {
    const catalog = loadCatalog(DEFAULT_FILE);
    expect(catalog.persona('concise')).to.be.a('string').and.not.empty;
    expect(catalog.persona('toString')).to.equal(undefined);
    expect(catalog.persona('nobody')).to.equal(undefined);
  });

  it('rejects a price written as a JSON number, naming the entry and the field', () => {
    const doc = shipped();
    (doc.models[3] as Record<string, unknown>).input_price_per_million = 1.25;
    const msg = problemsOf(doc);
    expect(msg).to.contain('test-models.json');
    expect(msg).to.contain('models[3].input_price_per_million (model "gemini-2.5-pro")');
  });

  it('rejects a price with more than six decimal places', () => {
    const doc = shipped();
    doc.models[3]!.output_price_per_million = '10.0000001';
    expect(problemsOf(doc)).to.contain('models[3].output_price_per_million');
  });

  it('rejects a price below the 0.30 floor', () => {
    const doc = shipped();
    doc.models[1]!.input_price_per_million = '0.10';
    expect(problemsOf(doc)).to.match(
      /models\[1\]\.input_price_per_million .*0\.10 is below the service's price floor of 0\.30/,
    );
  });

  it('rejects a catalog whose cheapest price is above 0.30', () => {
    const doc = shipped();
    for (const m of doc.models) {
      if (m.input_price_per_million === '0.30') m.input_price_per_million = '0.35';
    }
    expect(problemsOf(doc)).to.contain('the cheapest price must be exactly 0.30');
  });

  it('prices prompt caching as each provider does: Anthropic reads at 0.1× and writes at 1.25× and 2×, OpenAI reads at 0.25×', () => {
    const catalog = loadCatalog(DEFAULT_FILE);
    const prices = (id: string) => {
      const m = catalog.find(id)!;
      return [
        m.input_price_per_million,
        m.cached_input_price_per_million,
        m.cache_write_price_per_million,
        m.cache_write_1h_price_per_million,
      ];
    };
    expect(prices('claude-haiku-4-5')).to.deep.equal(['1.00', '0.10', '1.25', '2.00']);
    expect(prices('claude-sonnet-4-5')).to.deep.equal(['3.00', '0.30', '3.75', '6.00']);
    expect(prices('gpt-4.1')).to.deep.equal(['2.00', '0.50', '2.00', '2.00']);
    expect(prices('gemini-2.5-flash')).to.deep.equal(['0.30', '0.03', '0.30', '0.30']);
  });

  it('fills the cache prices a file leaves out from the input price: no discount, no surcharge', () => {
    const doc = shipped();
    delete doc.models[5]!.cached_input_price_per_million;
    const m = parseCatalog(doc, 'test-models.json').models[5]!;
    expect([
      m.cached_input_price_per_million,
      m.cache_write_price_per_million,
      m.cache_write_1h_price_per_million,
    ]).to.deep.equal([m.input_price_per_million, m.input_price_per_million, m.input_price_per_million]);
  });

  it('rejects a cached-input price above the input price', () => {
    const doc = shipped();
    doc.models[5]!.cached_input_price_per_million = '2.50';
    expect(problemsOf(doc)).to.match(
      /models\[5\]\.cached_input_price_per_million .*2\.50 is above the input price 2\.00/,
    );
  });

  it('rejects a cache-write price below the input price, and a 1-hour price below the 5-minute one', () => {
    const doc = shipped();
    doc.models[2]!.cache_write_price_per_million = '0.90';
    expect(problemsOf(doc)).to.match(
      /models\[2\]\.cache_write_price_per_million .*0\.90 is below the input price 1\.00/,
    );
    const again = shipped();
    again.models[2]!.cache_write_1h_price_per_million = '1.20';
    expect(problemsOf(again)).to.match(/models\[2\]\.cache_write_1h_price_per_million .*1\.20 is below the 5-minute/);
  });

  it('rejects duplicate ids', () => {
    const doc = shipped();
    doc.models.push({ ...doc.models[4]! });
    expect(problemsOf(doc)).to.contain(`duplicate id "claude-sonnet-4-5"`);
  });

  it('rejects an id longer than the 50 characters a request may name', () => {
    const doc = shipped();
    doc.models[5]!.id = 'x'.repeat(51);
    expect(problemsOf(doc)).to.contain('models[5].id');
  });

  it('rejects an unknown provider', () => {
    const doc = shipped();
    (doc.models[5] as Record<string, unknown>).provider = 'mistral';
    expect(problemsOf(doc)).to.match(/models\[5\]\.provider .*Input should be/);
  });

  it('rejects a fourth free-tier model', () => {
    const doc = shipped();
    doc.models[4]!.tiers = ['free', 'paid'];
    expect(problemsOf(doc)).to.contain('the free tier must have exactly 3 models');
  });

  it('rejects a free tier without Claude Haiku 4.5', () => {
    const doc = shipped();
    doc.models[2]!.tiers = ['paid'];
    doc.models[4]!.tiers = ['free', 'paid'];
    expect(problemsOf(doc)).to.contain('exactly one Claude Haiku 4.5; found 0');
  });

  it('rejects a free-tier model that is not also on the paid tier', () => {
    const doc = shipped();
    doc.models[0]!.tiers = ['free'];
    expect(problemsOf(doc)).to.contain(
      'models[0].tiers (model "gemini-2.5-flash"): a free-tier model must also be on the paid tier',
    );
  });

  it('rejects a misspelled field rather than ignoring it', () => {
    const doc = shipped();
    (doc.models[0] as Record<string, unknown>).input_price_per_milion = '0.30';
    expect(problemsOf(doc)).to.contain(
      'models[0].input_price_per_milion (model "gemini-2.5-flash"): Extra inputs are not permitted',
    );
  });

  describe('from a file', () => {
    let dir: string;
    before(() => {
      dir = mkdtempSync(path.join(os.tmpdir(), 'catalog-'));
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    it('names the file when it is not valid JSON', () => {
      const file = path.join(dir, 'broken.json');
      writeFileSync(file, '{ "models": [ ');
      expect(() => loadCatalog(file)).to.throw(
        CatalogError,
        new RegExp(`invalid model catalog ${file}.*not valid JSON`, 's'),
      );
    });

    it('names the file when it does not exist', () => {
      const file = path.join(dir, 'missing.json');
      expect(() => loadCatalog(file)).to.throw(CatalogError, /cannot read the file/);
    });

    it('loads another catalog file an operator points at', () => {
      const doc = shipped();
      doc.models.push({
        id: 'house-model',
        provider: 'local',
        upstream_model: 'house',
        tiers: ['paid'],
        input_price_per_million: '0.50',
        output_price_per_million: '0.50',
      });
      const file = path.join(dir, 'custom.json');
      writeFileSync(file, JSON.stringify(doc));
      expect(loadCatalog(file).find('house-model')?.provider).to.equal('local');
    });
  });
});
