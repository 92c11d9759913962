import type { AppContext } from '../context.js';
import type { CatalogModel, ProviderName } from '../catalog/catalog.js';
import { AppError } from '../errors.js';
import { AnthropicProvider, checkAnthropicRequest } from './anthropic.provider.js';
import { checkGeminiRequest, GeminiProvider } from './gemini.provider.js';
import { LocalProvider } from './local.provider.js';
import { checkOpenAIRequest, OpenAIProvider } from './openai.provider.js';
import type { CompletionParams, Provider } from './types.js';

type Upstream = Exclude<ProviderName, 'local'>;

const REQUEST_RULES: Record<Upstream, (p: CompletionParams) => void> = {
  openai: checkOpenAIRequest,
  anthropic: checkAnthropicRequest,
  gemini: checkGeminiRequest,
};

function localProvider(app: AppContext): Provider {
  return app.once('provider:local', () => new LocalProvider(app.config.providers.local));
}

/** The local model answering for a model of another provider (MODEL_BACKEND=local), under its rules. */
function localStandIn(app: AppContext, name: Upstream): Provider {
  return app.once(`provider:local-as-${name}`, () => new LocalProvider(app.config.providers.local, REQUEST_RULES[name]));
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
 * provider keys) every model is served by the built-in local model, under the request rules of
 * the catalog's provider; otherwise by the catalog's provider. Instances are built once per process.
 */
export function providerFor(app: AppContext, model: CatalogModel): Provider {
  if (model.provider === 'local') return localProvider(app);
  if (app.config.providers.backend === 'local') return localStandIn(app, model.provider);
  return upstreamProvider(app, model, model.provider);
}
