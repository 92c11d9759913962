import { expect } from 'chai';
import { createContext, type AppContext } from '../../src/context.js';
import { adapterOf } from '../../src/providers/types.js';
import { AppError } from '../../src/errors.js';
import { AnthropicProvider } from '../../src/providers/anthropic/anthropic.provider.js';
import { GeminiProvider } from '../../src/providers/gemini/gemini.provider.js';
import { LocalProvider } from '../../src/providers/local/local.provider.js';
import { OpenAIProvider } from '../../src/providers/openai/openai.provider.js';
import { telemetryNameOf } from '../../src/providers/registry.js';
import type { Env } from '../../src/config.js';
import { testConfig } from '../support/env.js';

describe('provider registry', () => {
  const contexts: AppContext[] = [];
  const context = (env: Env) => {
    const app = createContext(testConfig(env), { role: 'test' });
    contexts.push(app);
    return app;
  };
  after(async () => {
    for (const app of contexts) await app.close();
  });

  it('serves every catalog model from the local model when the backend is local', () => {
    const app = context({ MODEL_BACKEND: 'local' });
    for (const model of app.catalog.models) expect(adapterOf(app.providers.for(model))).to.be.instanceOf(LocalProvider);
  });

  it("serves each model from its catalog provider when that provider's key is set", () => {
    const app = context({
      MODEL_BACKEND: 'catalog',
      OPENAI_API_KEY: 'k1',
      ANTHROPIC_API_KEY: 'k2',
      GEMINI_API_KEY: 'k3',
    });
    const catalog = app.catalog;
    expect(adapterOf(app.providers.for(catalog.find('gpt-4.1')!))).to.be.instanceOf(OpenAIProvider);
    expect(adapterOf(app.providers.for(catalog.find('claude-haiku-4-5')!))).to.be.instanceOf(AnthropicProvider);
    expect(adapterOf(app.providers.for(catalog.find('gemini-2.5-flash')!))).to.be.instanceOf(GeminiProvider);
  });

  it("names each adapter in telemetry by its plug-in's telemetry name, and the local model by its own when it stands in", () => {
    const app = context({
      MODEL_BACKEND: 'catalog',
      OPENAI_API_KEY: 'k1',
      ANTHROPIC_API_KEY: 'k2',
      GEMINI_API_KEY: 'k3',
    });
    const named = (id: string) => telemetryNameOf(app.providers.for(app.catalog.find(id)!));
    expect([named('gpt-4.1'), named('claude-haiku-4-5'), named('gemini-2.5-flash')]).to.deep.equal([
      'openai',
      'anthropic',
      'gcp.gemini',
    ]);
    const local = context({ MODEL_BACKEND: 'local' });
    expect(telemetryNameOf(local.providers.for(local.catalog.find('gemini-2.5-flash')!))).to.equal('local');
  });

  it('builds one adapter per provider per process', () => {
    const app = context({ MODEL_BACKEND: 'catalog', GEMINI_API_KEY: 'k3' });
    const catalog = app.catalog;
    expect(app.providers.for(catalog.find('gemini-2.5-flash')!)).to.equal(
      app.providers.for(catalog.find('gemini-2.5-pro')!),
    );
  });

  it('answers 503 model_unavailable, naming the model and provider, when the provider has no key', () => {
    const app = context({ MODEL_BACKEND: 'catalog', GEMINI_API_KEY: 'k3' });
    const model = app.catalog.find('claude-sonnet-4-5')!;
    expect(() => app.providers.for(model))
      .to.throw(
        AppError,
        'Model claude-sonnet-4-5 is unavailable: its provider (anthropic) is not configured on this server',
      )
      .with.property('status', 503);
    try {
      app.providers.for(model);
    } catch (err) {
      expect((err as AppError).code).to.equal('model_unavailable');
    }
  });

  it('serves a catalog model whose provider is local from the local model in production configuration', () => {
    const app = context({ MODEL_BACKEND: 'catalog', OPENAI_API_KEY: 'k1' });
    const local = { ...app.catalog.models[0]!, id: 'house', provider: 'local' as const };
    expect(adapterOf(app.providers.for(local))).to.be.instanceOf(LocalProvider);
  });
});
