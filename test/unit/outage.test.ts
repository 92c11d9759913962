import { expect } from 'chai';
import { isDependencyDown } from '../../src/infra/outage.js';

describe('telling a dependency outage from a failed query', () => {
  it('recognises Postgres and Redis out of reach', () => {
    expect(
      isDependencyDown(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })),
    ).to.equal(true);
    expect(isDependencyDown(new Error('Connection terminated unexpectedly'))).to.equal(true);
    expect(isDependencyDown(new Error('timeout exceeded when trying to connect'))).to.equal(true);
    expect(
      isDependencyDown(
        Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }),
      ),
    ).to.equal(true);
    expect(
      isDependencyDown(Object.assign(new Error('the database system is starting up'), { code: '57P03' })),
    ).to.equal(true);
    expect(isDependencyDown(new Error("Stream isn't writeable and enableOfflineQueue options is false"))).to.equal(
      true,
    );
    expect(isDependencyDown(new AggregateError([Object.assign(new Error('x'), { code: 'ECONNREFUSED' })]))).to.equal(
      true,
    );
    expect(
      isDependencyDown(new Error('wrapped', { cause: Object.assign(new Error('y'), { code: 'ECONNRESET' }) })),
    ).to.equal(true);
  });

  it('does not take a wrong query or a bug for an outage', () => {
    expect(isDependencyDown(Object.assign(new Error('duplicate key value'), { code: '23505' }))).to.equal(false);
    expect(isDependencyDown(Object.assign(new Error('syntax error'), { code: '42601' }))).to.equal(false);
    expect(isDependencyDown(new TypeError('cannot read properties of undefined'))).to.equal(false);
    expect(isDependencyDown(undefined)).to.equal(false);
  });
});
