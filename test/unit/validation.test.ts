import { expect } from 'chai';
import { AppError } from '../../src/errors.js';
import { validate } from '../../src/validation.js';

const schema = {
  type: 'object',
  required: ['name', 'items'],
  properties: {
    name: { type: 'string', maxLength: 5 },
    email: { type: 'string', format: 'email' },
    items: { type: 'array', maxItems: 2, items: { type: 'object', required: ['n'], properties: { n: { type: 'integer', minimum: 1, maximum: 3 } } } },
  },
};

function issues(value: unknown) {
  try {
    validate(schema, value, 'body');
  } catch (err) {
    expect(err).to.be.instanceOf(AppError);
    return (err as AppError).toBody() as { detail: { loc: (string | number)[]; msg: string; type: string }[] };
  }
  throw new Error('expected a validation error');
}

describe('request validation', () => {
  it('reports a missing field at body.<field> with type "missing"', () => {
    expect(issues({ items: [] }).detail).to.deep.equal([{ loc: ['body', 'name'], msg: 'Field required', type: 'missing' }]);
  });

  it('locates a nested failure by path, array indexes as integers', () => {
    expect(issues({ name: 'a', items: [{ n: 1 }, { n: 9 }] }).detail).to.deep.equal([
      { loc: ['body', 'items', 1, 'n'], msg: 'Input should be less than or equal to 3', type: 'less_than_equal' },
    ]);
  });

  it('reports every failing field once', () => {
    const d = issues({ name: 'toolong', email: 'nope', items: [{}, {}, {}] }).detail;
    expect(d.map((i) => i.loc)).to.deep.equal([['body', 'name'], ['body', 'email'], ['body', 'items'], ['body', 'items', 0, 'n'], ['body', 'items', 1, 'n'], ['body', 'items', 2, 'n']]);
    expect(d[0]).to.deep.include({ type: 'string_too_long', msg: 'String should have at most 5 characters' });
    expect(d[1]).to.deep.include({ type: 'value_error' });
    expect(d[2]).to.deep.include({ type: 'too_long' });
  });

  it('returns the value unchanged when it is valid', () => {
    const v = { name: 'ok', items: [{ n: 2 }] };
    expect(validate(schema, v, 'body')).to.equal(v);
  });
});
