import { defineProvider } from '../plugin.js';

/** Claude, through the official SDK (Messages API). */
export const anthropic = defineProvider({
  name: 'anthropic',
  label: 'Anthropic',
  telemetryName: 'anthropic',
  settings: {
    apiKey: { kind: 'key', variable: 'ANTHROPIC_API_KEY' },
    baseUrl: { kind: 'url', variable: 'ANTHROPIC_BASE_URL' },
  },
  adapter: async () => {
    const [{ AnthropicProvider }, { checkAnthropicRequest }] = await Promise.all([
      import('./anthropic.provider.js'),
      import('./anthropic.rules.js'),
    ]);
    return {
      rules: checkAnthropicRequest,
      create: (s, shared) =>
        new AnthropicProvider({
          apiKey: s.apiKey,
          baseUrl: s.baseUrl,
          timeoutMs: shared.timeoutMs,
          defaultMaxTokens: shared.defaultMaxTokens,
        }),
    };
  },
});
