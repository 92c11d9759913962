import { expect } from 'chai';
import { jsonSchemaProblems, schemaMismatch } from '../../src/providers/json-schema.js';

// Client patterns run on V8's linear-time engine: a pattern it cannot run is refused at
// admission, and one it runs takes time linear in the string, where the backtracking engine
// would take 2^n steps. The bound is mocha's timeout: a backtracking run would never end.
const withPattern = (pattern: string) => ({
  type: 'object',
  properties: { v: { type: 'string', pattern } },
  required: ['v'],
});

describe('client JSON Schema patterns', function () {
  this.timeout(5_000);

  for (const pattern of ['^(?!(a|a)*b)a{40}$', '(a)\\1', '(?<=x)y', '(a){20}\\1']) {
    it(`refuses ${pattern}, which cannot run in linear time, at the pattern`, () => {
      const [problem] = jsonSchemaProblems(withPattern(pattern));
      expect(problem?.at).to.deep.equal(['properties', 'v', 'pattern']);
      expect(problem?.msg).to.match(/without backreferences and lookaround/);
    });
  }

  it("runs counted repetitions above the engine's own count of 16 exactly as written", () => {
    const schema = withPattern('^[a-zA-Z0-9_-]{1,64}$');
    expect(jsonSchemaProblems(schema)).to.deep.equal([]);
    expect(schemaMismatch(schema, { v: 'a'.repeat(64) })).to.equal(undefined);
    expect(schemaMismatch(schema, { v: 'a'.repeat(65) })).to.match(/must match pattern/);
    expect(schemaMismatch(schema, { v: '' })).to.match(/must match pattern/);
    expect(schemaMismatch(withPattern('^(?<pair>ab){20,}$'), { v: 'ab'.repeat(20) })).to.equal(undefined);
    expect(schemaMismatch(withPattern('^(?<pair>ab){20,}$'), { v: 'ab'.repeat(19) })).to.match(/must match pattern/);
  });

  it('matches ^(a|aa){1,64}b$ against a long string in linear time', () => {
    expect(schemaMismatch(withPattern('^(a|aa){1,64}b$'), { v: 'a'.repeat(16_000) })).to.match(/must match pattern/);
  });

  it('refuses a counted repetition above 1,000 and one too large written out, at the pattern', () => {
    const [over] = jsonSchemaProblems(withPattern('^[a-z]{2000}$'));
    expect(over?.at).to.deep.equal(['properties', 'v', 'pattern']);
    expect(over?.msg).to.match(/more than 1,000 times.*maxLength/);
    const [written] = jsonSchemaProblems(withPattern('^(?:[a-z]{1,100}){1,100}$'));
    expect(written?.msg).to.match(/more than 50,000 characters written out/);
  });

  it('refuses a schema whose distinct patterns, written out, come to more than 50,000 characters', () => {
    const schema = {
      type: 'object',
      properties: Object.fromEntries(
        Array.from({ length: 100 }, (_, i) => [`p${i}`, { type: 'string', pattern: `^[a-z]{1,64}${i}$` }]),
      ),
    };
    const [problem] = jsonSchemaProblems(schema);
    expect(problem?.at).to.deep.equal([]);
    expect(problem?.msg).to.match(/patterns come to [\d,]+ characters .* at most 50,000/);
    // The same pattern a hundred times is one pattern.
    const same = {
      ...schema,
      properties: Object.fromEntries(
        Array.from({ length: 100 }, (_, i) => [`p${i}`, { type: 'string', pattern: '^[a-z]{1,64}$' }]),
      ),
    };
    expect(jsonSchemaProblems(same)).to.deep.equal([]);
  });

  it('refuses Unicode property escapes, which mean something else without the u flag', () => {
    const [problem] = jsonSchemaProblems(withPattern('^\\p{L}+$'));
    expect(problem?.msg).to.match(/Unicode property or code point escapes/);
  });

  it('matches ^(a|aa)+$ and ^(a|a)*$ against long strings in linear time', () => {
    for (const pattern of ['^(a|aa)+$', '^(a|a)*$']) {
      expect(jsonSchemaProblems(withPattern(pattern))).to.deep.equal([]);
      expect(schemaMismatch(withPattern(pattern), { v: 'a'.repeat(50_000) })).to.equal(undefined);
      expect(schemaMismatch(withPattern(pattern), { v: `${'a'.repeat(50_000)}b` })).to.match(/must match pattern/);
    }
  });

  it('compiles and runs a schema of 5,000 properties without overflowing the stack', () => {
    const schema = {
      type: 'object',
      properties: Object.fromEntries(Array.from({ length: 5000 }, (_, i) => [`p${i}`, { type: 'string' }])),
      required: ['p4999'],
    };
    expect(jsonSchemaProblems(schema)).to.deep.equal([]);
    expect(schemaMismatch(schema, { p4999: 'x' })).to.equal(undefined);
    expect(schemaMismatch(schema, { p1: 'x' })).to.match(/p4999/);
  });
});
