import { defineOpenAICompatible } from '../../../../src/providers/openai/openai-compatible.plugin.js';

/**
 * A provider that exists only in the test tree, added the way any OpenAI-compatible provider is: this
 * folder and one entry in a provider list (test/support/providers/providers.ts). The suite serves it
 * from the OpenAI fake.
 */
export const acme = defineOpenAICompatible({
  name: 'acme',
  label: 'Acme AI',
  telemetryName: 'acme.ai',
  defaultBaseUrl: 'https://api.acme.invalid/v1',
  settings: {
    apiKey: { kind: 'key', variable: 'ACME_API_KEY' },
    baseUrl: { kind: 'url', variable: 'ACME_BASE_URL' },
  },
});
