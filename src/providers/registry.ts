import type { Config } from '../config.js';
import { AppError } from '../errors.js';
import { LocalProvider } from './local/local.provider.js';
import { isConfigured, type ProviderAdapter, type ProviderPlugin } from './plugin.js';
import { PROVIDERS, type ProviderName } from './providers.js';
import type { Provider } from './types.js';

// Every plug-in's adapter module (and its SDK) loads here, once, with the registry: the list in
// providers.ts only names them, so config.ts reads the providers' settings without loading one.
const PLUGINS = new Map<string, { plugin: ProviderPlugin; adapter: ProviderAdapter }>(
  await Promise.all(
    PROVIDERS.map(
      async (plugin: ProviderPlugin) => [plugin.name, { plugin, adapter: await plugin.adapter() }] as const,
    ),
  ),
);

/** What the registry reads of a catalog model: providers know nothing of the catalog beyond this. */
export interface ServedModel {
  id: string;
  provider: ProviderName;
}

function unavailable(model: ServedModel): AppError {
  return new AppError(
    'unavailable',
    `Model ${model.id} is unavailable: its provider (${model.provider}) is not configured on this server`,
    {
      code: 'model_unavailable',
    },
  );
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

  for(model: ServedModel): Provider {
    const name = model.provider;
    const { providers, limits } = this.config;
    const found = PLUGINS.get(name);
    if (!found) throw unavailable(model);
    const { plugin, adapter } = found;
    if (providers.backend === 'local' && name !== 'local')
      return this.once(`local-as-${name}`, () => new LocalProvider(providers.local, adapter.rules));
    const settings = providers[name];
    if (!isConfigured(plugin.settings, settings)) throw unavailable(model);
    return this.once(name, () =>
      adapter.create(settings, {
        timeoutMs: providers.requestTimeoutMs,
        defaultMaxTokens: limits.defaultCompletionReservation,
      }),
    );
  }

  private once(key: string, make: () => Provider): Provider {
    let p = this.built.get(key);
    if (!p) this.built.set(key, (p = make()));
    return p;
  }
}
