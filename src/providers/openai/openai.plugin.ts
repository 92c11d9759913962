import { defineProvider } from '../plugin.js';

/** OpenAI, and OpenAI-compatible servers (vLLM, Ollama, llama.cpp) behind OPENAI_BASE_URL. */
export const openai = defineProvider({
  name: 'openai',
  settings: {
    apiKey: { kind: 'key', variable: 'OPENAI_API_KEY' },
    baseUrl: { kind: 'url', variable: 'OPENAI_BASE_URL' },
  },
  adapter: async () => {
    const [{ OpenAIProvider }, { checkOpenAIRequest }] = await Promise.all([
      import('./openai.provider.js'),
      import('./openai.rules.js'),
    ]);
    return {
      rules: checkOpenAIRequest,
      create: (s, shared) => new OpenAIProvider({ apiKey: s.apiKey, baseUrl: s.baseUrl, timeoutMs: shared.timeoutMs }),
    };
  },
});
