import { defineProvider } from '../plugin.js';

/**
 * The built-in local model: no key, so always offered. It also stands in for every other
 * provider's models with MODEL_BACKEND=local, under that provider's rules (registry.ts).
 */
export const local = defineProvider({
  name: 'local',
  label: 'The local model',
  telemetryName: 'local',
  settings: {
    ttftMs: { kind: 'int', variable: 'LOCAL_MODEL_TTFT_MS', fallback: 200, min: 0, max: 60_000 },
    tokensPerSecond: { kind: 'int', variable: 'LOCAL_MODEL_TOKENS_PER_SECOND', fallback: 50, min: 1, max: 1_000_000 },
    generationBudgetMs: {
      kind: 'int',
      variable: 'LOCAL_MODEL_GENERATION_BUDGET_MS',
      fallback: 5000,
      min: 100,
      max: 600_000,
    },
    maxAnswerChars: {
      kind: 'int',
      variable: 'LOCAL_MODEL_MAX_ANSWER_CHARS',
      fallback: 100_000,
      min: 1000,
      max: 10_000_000,
    },
  },
  adapter: async () => {
    const [{ LocalProvider }, { checkLocalRequest }] = await Promise.all([
      import('./local.provider.js'),
      import('./local.rules.js'),
    ]);
    return { rules: checkLocalRequest, create: (s, shared) => new LocalProvider(s, shared.compute, shared.clock) };
  },
});
