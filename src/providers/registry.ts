import type { AppContext } from '../context.js';
import type { CatalogModel, ProviderName } from '../catalog/catalog.js';
import { AppError } from '../errors.js';
import { AnthropicProvider } from './anthropic.provider.js';
import { GeminiProvider } from './gemini.provider.js';
import { LocalProvider } from './local.provider.js';
import { OpenAIProvider } from './openai.provider.js';
import type { Provider } from './types.js';

type Upstream = Exclude<ProviderName, 'local'>;

function localProvider(app: AppContext): Provider {
  return app.once('provider:local', () => new LocalProvider(app.config.providers.local));
}

function unavailable(model: CatalogModel): AppError {
  return new AppError('unavailable', `Model ${model.id} is unavailable: its provider (${model.provider}) is not configured on this server`, {
    code: 'model_unavailable',
  });
}

function upstreamProvider(app: AppContext, model: CatalogModel, name: Upstream): Provider {
  const { providers, limits } = app.config;
  const settings = providers[name];
  // Without its key a provider is simply not offered: 503, never a stand-in answer.
  if (settings.apiKey === undefined) throw unavailable(model);
  const upstream = { apiKey: settings.apiKey, baseUrl: settings.baseUrl, timeoutMs: providers.requestTimeoutMs };
  return app.once(`provider:${name}`, (): Provider => {
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

/**
 * The adapter serving a catalog model. With MODEL_BACKEND=local (the default on a machine with no
 * provider keys) every model is served by the built-in local model; otherwise the catalog's
 * provider. Instances are built once per process.
 */
export function providerFor(app: AppContext, model: CatalogModel): Provider {
  if (app.config.providers.backend === 'local' || model.provider === 'local') return localProvider(app);
  return upstreamProvider(app, model, model.provider);
}
