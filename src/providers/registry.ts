import type { Config } from '../config.js';
import type { Clock } from '../clock.js';
import { AppError } from '../errors.js';
import { local } from './local/local.plugin.js';
import { LocalProvider } from './local/local.provider.js';
import { withCheckedOutput } from './checked-output.js';
import type { ComputePool } from './compute-pool.js';
import { withFanOut } from './fan-out.js';
import { isConfigured, type ProviderAdapter, type ProviderPlugin, type SettingsOf } from './plugin.js';
import { PROVIDERS, type ProviderName } from './providers.js';
import type { Provider } from './types.js';

/** Each plug-in's adapter module, loaded once per process. */
const ADAPTERS = new WeakMap<ProviderPlugin, ProviderAdapter>();
/** The plug-in each adapter instance serves, which names it in telemetry. */
const SERVED_BY = new WeakMap<Provider, ProviderPlugin>();

/**
 * Loads the plug-ins' adapter modules (and their SDKs) into this process. Every plug-in in
 * providers.ts loads here, with the registry: the list only names them, so config.ts reads the
 * providers' settings without loading one. A test that adds a plug-in of its own loads it too.
 */
export async function loadAdapters(plugins: readonly ProviderPlugin[]): Promise<void> {
  for (const [plugin, adapter] of await Promise.all(plugins.map(async (p) => [p, await p.adapter()] as const)))
    ADAPTERS.set(plugin, adapter);
}

await loadAdapters(PROVIDERS);

/**
 * OpenTelemetry's `gen_ai.provider.name` for the calls of an adapter the registry built: its
 * plug-in's telemetry name (the local model's when it stands in for another provider).
 */
export function telemetryNameOf(provider: Provider): string {
  return SERVED_BY.get(provider)?.telemetryName ?? provider.name;
}

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

  constructor(
    private readonly config: Pick<Config, 'providers' | 'limits'>,
    private readonly compute: ComputePool,
    private readonly clock: Clock,
  ) {}

  for(model: ServedModel): Provider {
    const name = model.provider;
    const { providers, limits } = this.config;
    const plugin = providers.plugins.find((p) => p.name === name);
    if (!plugin) throw unavailable(model);
    const adapter = ADAPTERS.get(plugin);
    if (!adapter) throw new Error(`provider ${name}: its adapter is not loaded (loadAdapters)`);
    if (providers.backend === 'local' && name !== 'local')
      return this.once(`local-as-${name}`, local, () =>
        withCheckedOutput(new LocalProvider(providers.local, this.compute, this.clock, adapter.rules), this.compute),
      );
    // By the plug-in's name: the settings' type covers providers.ts's list, a test's own plug-in too.
    const settings = (providers as unknown as Record<string, SettingsOf<typeof plugin.settings>>)[name]!;
    if (!isConfigured(plugin.settings, settings)) throw unavailable(model);
    // n beyond what one call answers becomes several calls; strict json_schema answers are checked.
    return this.once(name, plugin, () =>
      withCheckedOutput(
        withFanOut(
          adapter.create(settings, {
            timeoutMs: providers.requestTimeoutMs,
            defaultMaxTokens: limits.defaultCompletionReservation,
            compute: this.compute,
            clock: this.clock,
          }),
        ),
        this.compute,
      ),
    );
  }

  private once(key: string, plugin: ProviderPlugin, make: () => Provider): Provider {
    let p = this.built.get(key);
    if (!p) {
      this.built.set(key, (p = make()));
      SERVED_BY.set(p, plugin);
    }
    return p;
  }
}
