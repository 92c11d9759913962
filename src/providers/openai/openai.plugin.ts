import { defineOpenAICompatible } from './openai-compatible.plugin.js';

/** OpenAI, and OpenAI-compatible servers (vLLM, Ollama, llama.cpp) behind OPENAI_BASE_URL. */
export const openai = defineOpenAICompatible({
  name: 'openai',
  label: 'OpenAI',
  telemetryName: 'openai',
  defaultBaseUrl: 'https://api.openai.com/v1',
  settings: {
    apiKey: { kind: 'key', variable: 'OPENAI_API_KEY' },
    baseUrl: { kind: 'url', variable: 'OPENAI_BASE_URL' },
  },
});
