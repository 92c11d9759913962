import type { Config } from '../config.js';
import type { CatalogModel, ProviderName } from '../catalog/catalog.js';
import { AppError } from '../errors.js';
import { AnthropicProvider } from './anthropic/anthropic.provider.js';
import { checkAnthropicRequest } from './anthropic/anthropic.rules.js';
import { GeminiProvider } from './gemini/gemini.provider.js';
import { checkGeminiRequest } from './gemini/gemini.rules.js';
import { LocalProvider } from './local/local.provider.js';
import { OpenAIProvider } from './openai/openai.provider.js';
import { checkOpenAIRequest } from './openai/openai.rules.js';
import type { CompletionParams, Provider } from './types.js';

type Upstream = Exclude<ProviderName, 'local'>;

const REQUEST_RULES: Record<Upstream, (p: CompletionParams) => void> = {
  openai: checkOpenAIRequest,
  anthropic: checkAnthropicRequest,
  gemini: checkGeminiRequest,
};

function unavailable(model: CatalogModel): AppError {
  return new AppError('unavailable', `Model ${model.id} is unavailable: its provider (${model.provider}) is not configured on this server`, {
    code: 'model_unavailable',
  });
}

/**
 * The adapters serving catalog models, one instance per provider per process, built on first use.
 * With MODEL_BACKEND=local (the default on a machine with no provider keys) every model is served
 * by the built-in local model, under the request rules of the catalog's provider; otherwise by the
 * catalog's provider, and a provider without its key is simply not offered (503, never a stand-in).
 */
export class ProviderRegistry {
  private readonly built = new Map<string, Provider>();

  constructor(private readonly config: Pick<Config, 'providers' | 'limits'>) {}

  for(model: CatalogModel): Provider {
    if (model.provider === 'local') return this.once('local', () => new LocalProvider(this.config.providers.local));
    const name = model.provider;
    if (this.config.providers.backend === 'local') return this.once(`local-as-${name}`, () => new LocalProvider(this.config.providers.local, REQUEST_RULES[name]));
    const { providers, limits } = this.config;
    const settings = providers[name];
    if (settings.apiKey === undefined) throw unavailable(model);
    const upstream = { apiKey: settings.apiKey, baseUrl: settings.baseUrl, timeoutMs: providers.requestTimeoutMs };
    return this.once(name, (): Provider => {
      switch (name) {
        case 'openai':
          return new OpenAIProvider(upstream);
        case 'anthropic':
          return new AnthropicProvider({ ...upstream, defaultMaxTokens: limits.defaultCompletionReservation });
        case 'gemini':
          return new GeminiProvider(upstream);
      }
    });
  }

  private once(key: string, make: () => Provider): Provider {
    let p = this.built.get(key);
    if (!p) this.built.set(key, (p = make()));
    return p;
  }
}
