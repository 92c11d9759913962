// The suite's provider list: providers.ts's, and the test tree's own OpenAI-compatible provider,
// one entry as it would be there. testConfig reads their settings and the registry serves them.
import { PROVIDERS } from '../../../src/providers/providers.js';
import { loadAdapters } from '../../../src/providers/registry.js';
import { acme } from './acme/acme.plugin.js';

export const TEST_PROVIDERS = [...PROVIDERS, acme] as const;

await loadAdapters(TEST_PROVIDERS);
