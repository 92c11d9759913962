import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { loadConfig } from '../../src/config.js';
import { variablesOf } from '../../src/providers/plugin.js';
import { PROVIDERS } from '../../src/providers/providers.js';
import { PROJECT_ROOT } from '../support/project.js';

// .env.example is where an operator finds every variable the service reads, so a variable added
// to config.ts, or a provider added with its own, fails here instead of going undocumented.

/** The variables loadConfig asks for, recorded by an environment in which none is set. */
function variablesConfigReads(): Set<string> {
  const read = new Set<string>();
  const env = new Proxy(
    {},
    {
      get(_target, name) {
        if (typeof name === 'string') read.add(name);
        return undefined;
      },
    },
  );
  loadConfig(env);
  return read;
}

function documentedVariables(): Set<string> {
  const text = readFileSync(path.join(PROJECT_ROOT, '.env.example'), 'utf8');
  return new Set(text.split('\n').flatMap((line) => /^([A-Z][A-Z0-9_]*)=/.exec(line)?.[1] ?? []));
}

describe('.env.example', () => {
  it('lists every variable src/config.ts reads', () => {
    const documented = documentedVariables();
    expect([...variablesConfigReads()].filter((v) => !documented.has(v))).to.deep.equal([]);
  });

  it("lists every provider plug-in's variables, which src/config.ts reads through the plug-in list", () => {
    const documented = documentedVariables();
    const read = variablesConfigReads();
    const variables = PROVIDERS.flatMap((p) => variablesOf(p));
    expect(variables).to.include.members(['OPENAI_API_KEY', 'LOCAL_MODEL_TTFT_MS']);
    expect(variables.filter((v) => !read.has(v))).to.deep.equal([]);
    expect(variables.filter((v) => !documented.has(v))).to.deep.equal([]);
  });
});
