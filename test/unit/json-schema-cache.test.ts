import { expect } from 'chai';
import v8 from 'node:v8';
import vm from 'node:vm';
import { compileSchema, compiledSchemaCache } from '../../src/providers/json-schema.js';

// The compiled-schema cache is bounded by bytes, and neither it nor Ajv's own cache keeps what
// it should not: a process that compiles a run of large, distinct schemas (a client's 128 tools
// with unique 470 KB descriptions, request after request) holds a bounded heap afterwards.
v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

const CACHE_BYTES = 16 * 1024 * 1024;
const DESCRIPTION = 470 * 1024;
let serial = 0;
const large = (extra: Record<string, unknown> = {}) => ({
  type: 'object',
  description: `${serial++}`.padEnd(DESCRIPTION, 'x'),
  properties: { q: { type: 'string' } },
  ...extra,
});
const heapUsed = () => {
  gc();
  return process.memoryUsage().heapUsed;
};

describe('the compiled-schema cache', function () {
  this.timeout(60_000);

  it('holds about 16 MiB of schema text at most, however many distinct schemas are compiled', () => {
    for (let i = 0; i < 60; i++) compileSchema(large());
    const { bytes, entries } = compiledSchemaCache();
    // The schema that takes a generation past its bytes is the last one it holds.
    expect(bytes).to.be.at.most(CACHE_BYTES + DESCRIPTION + 1024);
    expect(entries).to.be.at.most(Math.floor(CACHE_BYTES / DESCRIPTION) + 1);
  });

  it('keeps the heap bounded after 120 distinct 470 KB schemas (about 56 MB of text)', () => {
    for (let i = 0; i < 40; i++) compileSchema(large());
    const before = heapUsed();
    for (let i = 0; i < 120; i++) compileSchema(large());
    expect(heapUsed() - before).to.be.below(24 * 1024 * 1024);
  });

  it('keeps the heap bounded after 120 distinct 470 KB schemas that failed to compile, and caches none', () => {
    const { entries } = compiledSchemaCache();
    const before = heapUsed();
    for (let i = 0; i < 120; i++)
      expect(() => compileSchema(large({ properties: { q: { $ref: '#/$defs/missing' } } }))).to.throw();
    expect(heapUsed() - before).to.be.below(24 * 1024 * 1024);
    expect(compiledSchemaCache().entries).to.be.at.most(entries);
  });

  it('compiles a schema seen before once, by the hash of its text', () => {
    const schema = large();
    const first = compileSchema(schema);
    expect(compileSchema(JSON.parse(JSON.stringify(schema)) as typeof schema)).to.equal(first);
  });
});
