import { defineProvider, type ProviderPlugin } from '../plugin.js';

/** The settings every OpenAI-compatible plug-in declares: its API key and an override of its base URL. */
export type OpenAICompatibleSettings = {
  readonly apiKey: { kind: 'key'; variable: string };
  readonly baseUrl: { kind: 'url'; variable: string };
};

/** A provider that speaks OpenAI's chat completions API, served by the shared adapter (openai.provider.ts). */
export interface OpenAICompatiblePlugin<N extends string = string> extends ProviderPlugin<N, OpenAICompatibleSettings> {
  /** Where its API lives unless the base-URL setting overrides it (ending in /v1, before /chat/completions). */
  readonly defaultBaseUrl: string;
}

/**
 * Defines an OpenAI-compatible provider: a name, label, telemetry name, default base URL and its
 * own two settings. The adapter and OpenAI's request rules are shared, so such a provider is this
 * one call in a `<name>.plugin.ts` and one entry in providers.ts.
 */
export function defineOpenAICompatible<const N extends string>(
  plugin: Omit<OpenAICompatiblePlugin<N>, 'adapter'>,
): OpenAICompatiblePlugin<N> {
  const identity = { name: plugin.name, label: plugin.label, defaultBaseUrl: plugin.defaultBaseUrl };
  return {
    ...defineProvider<N, OpenAICompatibleSettings>({
      name: plugin.name,
      label: plugin.label,
      telemetryName: plugin.telemetryName,
      settings: plugin.settings,
      adapter: async () => {
        const [{ OpenAIProvider }, { checkOpenAIRequest }] = await Promise.all([
          import('./openai.provider.js'),
          import('./openai.rules.js'),
        ]);
        return {
          rules: checkOpenAIRequest,
          create: (s, shared) =>
            new OpenAIProvider({ apiKey: s.apiKey, baseUrl: s.baseUrl, timeoutMs: shared.timeoutMs }, identity),
        };
      },
    }),
    defaultBaseUrl: plugin.defaultBaseUrl,
  };
}
