// What a provider plug-in is: its name, label and telemetry name, the environment variables it
// reads, and (loaded only by the registry) its request rules and adapter factory. This module and every <name>.plugin.ts import
// nothing at run time, so config.ts reads every provider's settings through the list in
// providers.ts without loading an adapter or an SDK.
import type { Clock } from '../clock.js';
import type { ComputePool } from './compute-pool.js';
import type { CompletionParams, Provider } from './types.js';

/** One environment variable of a provider, as config.ts reads and validates it. */
export type Setting =
  /**
   * The provider's API key, optional. A provider with a key unset is not offered (503
   * model_unavailable), and with MODEL_BACKEND=auto any key set serves the catalog from its providers.
   */
  | { kind: 'key'; variable: string }
  /** An optional http or https URL, such as a base URL override. */
  | { kind: 'url'; variable: string }
  /** An integer from min to max; `fallback` when unset. */
  | { kind: 'int'; variable: string; fallback: number; min: number; max: number };

export type SettingsSchema = Readonly<Record<string, Setting>>;

type ValueOf<T extends Setting> = T extends { kind: 'int' } ? number : string | undefined;

/** The values config.ts reads for a schema: `config.providers.<name>`. */
export type SettingsOf<S extends SettingsSchema> = { readonly [K in keyof S]: ValueOf<S[K]> };

type KeyFields<S extends SettingsSchema> = { [K in keyof S]: S[K] extends { kind: 'key' } ? K : never }[keyof S];

/** The same values once the registry has seen every key set: what an adapter factory receives. */
export type ConfiguredSettings<S extends SettingsSchema> = SettingsOf<S> & { readonly [K in KeyFields<S>]: string };

/** What the registry hands every adapter besides its own settings. */
export interface SharedSettings {
  /** UPSTREAM_TIMEOUT_MS: the longest silence allowed from an upstream. */
  timeoutMs: number;
  /** DEFAULT_COMPLETION_RESERVATION: max_tokens for an API that requires one when the request sets none. */
  defaultMaxTokens: number;
  /** The process's threads for CPU-heavy work (the local model's JSON, large prompts' token counts). */
  compute: ComputePool;
  /** The process's clock (the local model's prompt cache expires by it). */
  clock: Clock;
}

/** The part of a plug-in that needs its adapter module (and SDK): loaded by the registry, never by config.ts. */
export interface ProviderAdapter<S extends SettingsSchema = SettingsSchema> {
  /**
   * What the provider's API accepts: throws AppError (422 naming the field) for a request it would
   * refuse. The local model applies them too when it stands in for the provider (MODEL_BACKEND=local).
   */
  readonly rules: (params: CompletionParams) => void;
  /** The provider's one adapter per process. */
  create(settings: ConfiguredSettings<S>, shared: SharedSettings): Provider;
}

export interface ProviderPlugin<N extends string = string, S extends SettingsSchema = SettingsSchema> {
  /** The catalog's `provider` and the model object's `owned_by`. */
  readonly name: N;
  /** How error messages name it ("OpenAI stream failed: …"). */
  readonly label: string;
  /**
   * OpenTelemetry's `gen_ai.provider.name` (and `gen_ai.system`) on the spans of its calls: the
   * GenAI conventions' well-known value where they define one (`openai`, `gcp.gemini`).
   */
  readonly telemetryName: string;
  readonly settings: S;
  /** A dynamic import of the adapter and its rules, so the list of plug-ins stays free of them. */
  readonly adapter: () => Promise<ProviderAdapter<S>>;
}

/** Checks a plug-in's shape and keeps its literal name and settings for the types derived from the list. */
export function defineProvider<const N extends string, const S extends SettingsSchema>(
  plugin: ProviderPlugin<N, S>,
): ProviderPlugin<N, S> {
  return plugin;
}

/** The environment variables a plug-in reads. */
export function variablesOf(plugin: ProviderPlugin): string[] {
  return Object.values(plugin.settings).map((s) => s.variable);
}

/** True when every key the schema declares has a value, so the provider can be called. */
export function isConfigured<S extends SettingsSchema>(
  schema: S,
  values: SettingsOf<S>,
): values is ConfiguredSettings<S> {
  return Object.entries(schema).every(([field, s]) => s.kind !== 'key' || values[field] !== undefined);
}
