// The providers, listed once. Everything else that names them derives from this list: the
// ProviderName type, the catalog's provider enum, the model object's owned_by, the provider
// settings config.ts reads, the registry's adapters and the name traces give their calls. Adding a provider: one folder under
// src/providers/ and one entry here (docs/models-and-providers.md, "Adding a provider").
// The plug-ins name their adapters without importing them, so importing this list loads no SDK.
import { anthropic } from './anthropic/anthropic.plugin.js';
import { gemini } from './gemini/gemini.plugin.js';
import { local } from './local/local.plugin.js';
import { openai } from './openai/openai.plugin.js';
import type { SettingsOf } from './plugin.js';

export const PROVIDERS = [openai, anthropic, gemini, local] as const;

export type ProviderName = (typeof PROVIDERS)[number]['name'];

export const PROVIDER_NAMES: readonly ProviderName[] = PROVIDERS.map((p) => p.name);

/** Every provider's settings by name, as config.ts reads them: `config.providers.<name>`. */
export type ProviderSettings = { [P in (typeof PROVIDERS)[number] as P['name']]: SettingsOf<P['settings']> };
