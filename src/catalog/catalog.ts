import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { Tier } from '../../db/schema/index.js';
import type { Config } from '../config.js';
import type { ProviderName } from '../providers/providers.js';
import { check } from '../validation.js';
import { catalogFileSchema } from './catalog.schema.js';

export interface CatalogModel {
  id: string;
  provider: ProviderName;
  upstream_model: string;
  tiers: Tier[];
  /** USD per 1M prompt tokens, exact decimal string. */
  input_price_per_million: string;
  /** USD per 1M completion tokens, exact decimal string. */
  output_price_per_million: string;
  /**
   * USD per 1M prompt tokens the provider read from its prompt cache. Never above the input price;
   * the file may leave it out (then it is the input price: no discount).
   */
  cached_input_price_per_million: string;
  /** USD per 1M prompt tokens written to the prompt cache (5-minute TTL); the input price when the file leaves it out. */
  cache_write_price_per_million: string;
  /** USD per 1M prompt tokens written with the 1-hour TTL; the 5-minute price when the file leaves it out. */
  cache_write_1h_price_per_million: string;
  /** The provider's list price when the floor raised it; informational. */
  published_input_price_per_million?: string;
  published_output_price_per_million?: string;
  description?: string;
  /** Text always; "image" when the model takes image_url parts. Absent: text only. */
  input_modalities?: ('text' | 'image')[];
  /** Prompt and completion tokens together, as the provider states it; absent when the catalog does not say. */
  context_length?: number;
  /**
   * The model thinks before it answers and has settings for how much: a request's
   * reasoning_effort is mapped onto them. Absent, reasoning_effort is accepted and not sent.
   */
  reasoning?: boolean;
}

export interface Catalog {
  models: CatalogModel[];
  personas: Record<string, string>;
  find(id: string): CatalogModel | undefined;
  forTier(tier: Tier): CatalogModel[];
  persona(name: string): string | undefined;
}

/**
 * The interface says "Pricing starts at 0.30 USD per 1M tokens". We read that as a floor on every
 * price we charge: a provider list price below it (Flash-Lite's 0.10 input, say) is billed at 0.30,
 * and the cheapest price in the catalog must be exactly 0.30.
 */
export const PRICE_FLOOR_PER_MILLION = '0.30';

/** A catalog that cannot be served: names the file and the entry and field at fault. */
export class CatalogError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(`invalid model catalog ${file} (MODELS_FILE):\n  - ${problems.join('\n  - ')}`);
    this.name = 'CatalogError';
  }
}

/** Decimal string (at most 6 places, already pattern-checked) to integer millionths, so comparisons never touch floats. */
export function priceMicros(price: string): bigint {
  const [whole, frac = ''] = price.split('.');
  return BigInt(whole!) * 1_000_000n + BigInt(frac.padEnd(6, '0'));
}

/** A catalog entry as the file holds it: the cache prices may be left out. */
type CatalogFileModel = Omit<
  CatalogModel,
  'cached_input_price_per_million' | 'cache_write_price_per_million' | 'cache_write_1h_price_per_million'
> &
  Partial<
    Pick<
      CatalogModel,
      'cached_input_price_per_million' | 'cache_write_price_per_million' | 'cache_write_1h_price_per_million'
    >
  >;

interface CatalogFile {
  models: CatalogFileModel[];
  personas: Record<string, string>;
}

function where(file: CatalogFile | undefined, loc: (string | number)[]): string {
  let out = '';
  for (const part of loc) out += typeof part === 'number' ? `[${part}]` : out === '' ? part : `.${part}`;
  if (loc[0] === 'models' && typeof loc[1] === 'number') {
    const id = file?.models?.[loc[1]]?.id;
    if (typeof id === 'string') out += ` (model "${id}")`;
  }
  return out || '(top level)';
}

// The free tier is fixed by the interface: one Flash-class and one Flash-Lite-class Gemini model
// and Claude Haiku 4.5. A class is recognised by the public id or the upstream name, so an
// operator may still serve one of them from the local model.
const FREE_CLASSES: { name: string; matches: (m: CatalogFileModel) => boolean; providers: ProviderName[] }[] = [
  {
    name: 'a Gemini Flash-Lite-class model',
    matches: (m) => /flash-lite/i.test(`${m.id} ${m.upstream_model}`),
    providers: ['gemini', 'local'],
  },
  {
    name: 'a Gemini Flash-class model',
    matches: (m) => /flash/i.test(`${m.id} ${m.upstream_model}`) && !/flash-lite/i.test(`${m.id} ${m.upstream_model}`),
    providers: ['gemini', 'local'],
  },
  {
    name: 'Claude Haiku 4.5',
    matches: (m) => /haiku-4[-.]5/i.test(`${m.id} ${m.upstream_model}`),
    providers: ['anthropic', 'local'],
  },
];

/** The rules JSON Schema cannot say: unique ids, the free-tier line-up, the price floor. */
function semanticProblems(data: CatalogFile): string[] {
  const problems: string[] = [];
  const seen = new Map<string, number>();
  data.models.forEach((m, i) => {
    const first = seen.get(m.id);
    if (first !== undefined) problems.push(`models[${i}].id: duplicate id "${m.id}" (first at models[${first}])`);
    else seen.set(m.id, i);
    for (const field of ['input_price_per_million', 'output_price_per_million'] as const) {
      if (priceMicros(m[field]) < priceMicros(PRICE_FLOOR_PER_MILLION)) {
        problems.push(
          `models[${i}].${field} (model "${m.id}"): ${m[field]} is below the service's price floor of ${PRICE_FLOOR_PER_MILLION} USD per 1M tokens`,
        );
      }
    }
    // Reading from the cache never costs more than the input price; writing to it never less.
    const input = priceMicros(m.input_price_per_million);
    if (m.cached_input_price_per_million !== undefined && priceMicros(m.cached_input_price_per_million) > input)
      problems.push(
        `models[${i}].cached_input_price_per_million (model "${m.id}"): ${m.cached_input_price_per_million} is above the input price ${m.input_price_per_million}`,
      );
    const write = m.cache_write_price_per_million ?? m.input_price_per_million;
    if (priceMicros(write) < input)
      problems.push(
        `models[${i}].cache_write_price_per_million (model "${m.id}"): ${write} is below the input price ${m.input_price_per_million}`,
      );
    if (
      m.cache_write_1h_price_per_million !== undefined &&
      priceMicros(m.cache_write_1h_price_per_million) < priceMicros(write)
    )
      problems.push(
        `models[${i}].cache_write_1h_price_per_million (model "${m.id}"): ${m.cache_write_1h_price_per_million} is below the 5-minute cache-write price ${write}`,
      );
  });

  const free = data.models.filter((m) => m.tiers.includes('free'));
  if (free.length !== 3) {
    problems.push(
      `models: the free tier must have exactly 3 models (Gemini Flash, Gemini Flash-Lite, Claude Haiku 4.5); found ${free.length}${free.length ? ` (${free.map((m) => m.id).join(', ')})` : ''}`,
    );
  }
  for (const cls of FREE_CLASSES) {
    const found = free.filter(cls.matches);
    if (found.length !== 1) {
      problems.push(
        `models: the free tier must have exactly one ${cls.name}; found ${found.length}${found.length ? ` (${found.map((m) => m.id).join(', ')})` : ''}`,
      );
    } else if (!cls.providers.includes(found[0]!.provider)) {
      problems.push(
        `models: free-tier model "${found[0]!.id}" is ${cls.name} but its provider is ${found[0]!.provider} (expected ${cls.providers.join(' or ')})`,
      );
    }
  }
  data.models.forEach((m, i) => {
    if (m.tiers.includes('free') && !m.tiers.includes('paid')) {
      problems.push(`models[${i}].tiers (model "${m.id}"): a free-tier model must also be on the paid tier`);
    }
  });

  const prices = data.models.flatMap((m) => [m.input_price_per_million, m.output_price_per_million]);
  if (prices.length && problems.length === 0) {
    const cheapest = prices.reduce((a, b) => (priceMicros(b) < priceMicros(a) ? b : a));
    if (priceMicros(cheapest) !== priceMicros(PRICE_FLOOR_PER_MILLION)) {
      problems.push(
        `models: the cheapest price must be exactly ${PRICE_FLOOR_PER_MILLION} USD per 1M tokens (the advertised "from" price); the cheapest is ${cheapest}`,
      );
    }
  }
  return problems;
}

/**
 * Parses and validates a catalog document whose models name the given providers (providers.ts's
 * list by default); throws CatalogError naming `file` and every fault.
 */
export function parseCatalog(raw: unknown, file: string, providerNames?: readonly string[]): Catalog {
  const result = check(catalogFileSchema(providerNames), raw);
  if (!result.ok) {
    throw new CatalogError(
      file,
      result.issues.map((i) => `${where(raw as CatalogFile, i.loc)}: ${i.msg}`),
    );
  }
  const data = raw as CatalogFile;
  const problems = semanticProblems(data);
  if (problems.length) throw new CatalogError(file, problems);
  return buildCatalog(data);
}

/** The file's entry with its cache prices filled in (see CatalogModel). */
function withCachePrices(m: CatalogFileModel): CatalogModel {
  const write = m.cache_write_price_per_million ?? m.input_price_per_million;
  return {
    ...m,
    cached_input_price_per_million: m.cached_input_price_per_million ?? m.input_price_per_million,
    cache_write_price_per_million: write,
    cache_write_1h_price_per_million: m.cache_write_1h_price_per_million ?? write,
  };
}

function buildCatalog(data: CatalogFile): Catalog {
  const models = data.models.map((m) =>
    Object.freeze({ ...withCachePrices(m), tiers: Object.freeze([...m.tiers]) as Tier[] }),
  );
  const byId = new Map(models.map((m) => [m.id, m]));
  const byTier = new Map<Tier, CatalogModel[]>(
    (['free', 'paid'] as Tier[]).map((t) => [
      t,
      Object.freeze(models.filter((m) => m.tiers.includes(t))) as CatalogModel[],
    ]),
  );
  const personas = Object.freeze({ ...data.personas });
  return Object.freeze({
    models: Object.freeze(models) as CatalogModel[],
    personas,
    find: (id: string) => byId.get(id),
    forTier: (tier: Tier) => byTier.get(tier) ?? [],
    persona: (name: string) => (Object.hasOwn(personas, name) ? personas[name] : undefined),
  });
}

/** Reads the catalog file (start-up only, so synchronously); an unreadable or invalid file throws CatalogError. */
export function loadCatalog(file: string, providerNames?: readonly string[]): Catalog {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CatalogError(file, [`cannot read the file: ${(err as Error).message}`]);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new CatalogError(file, [`not valid JSON: ${(err as Error).message}`]);
  }
  return parseCatalog(raw, file, providerNames);
}

/** The catalog file the configuration names, relative to the process's working directory. */
export function catalogFile(config: Pick<Config, 'catalog'>): string {
  return path.resolve(process.cwd(), config.catalog.modelsFile);
}
