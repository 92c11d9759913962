import { defineProvider } from '../plugin.js';

/** The Gemini API; GEMINI_BASE_URL is its root (with or without /v1beta). */
export const gemini = defineProvider({
  name: 'gemini',
  label: 'Gemini',
  telemetryName: 'gcp.gemini',
  settings: {
    apiKey: { kind: 'key', variable: 'GEMINI_API_KEY' },
    baseUrl: { kind: 'url', variable: 'GEMINI_BASE_URL' },
  },
  adapter: async () => {
    const [{ GeminiProvider }, { checkGeminiRequest }] = await Promise.all([
      import('./gemini.provider.js'),
      import('./gemini.rules.js'),
    ]);
    return {
      rules: checkGeminiRequest,
      create: (s, shared) => new GeminiProvider({ apiKey: s.apiKey, baseUrl: s.baseUrl, timeoutMs: shared.timeoutMs }),
    };
  },
});
