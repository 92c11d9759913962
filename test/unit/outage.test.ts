import { expect } from 'chai';
import { dependencyDown, isDependencyDown } from '../../src/infra/outage.js';

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

describe('the answer a client gets when a dependency is down', () => {
  it('is a 503 service_unavailable asking for a retry in 5 s, in the OpenAI error envelope', () => {
    const cause = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });
    const err = dependencyDown(cause);
    expect(err.status).to.equal(503);
    expect(err.headers).to.deep.equal({ 'Retry-After': '5' });
    expect(err.cause).to.equal(cause);
    expect(err.toBody()).to.deep.equal({
      error: {
        message: 'The service is temporarily unavailable. Please retry shortly.',
        type: 'service_unavailable',
        code: 'service_unavailable',
        param: null,
      },
    });
  });

  it('counts the failure in the outage log under the source that met it, in the feature’s words when given', () => {
    const seen: string[] = [];
    const err = dependencyDown(
      new Error('Connection is closed.'),
      { log: { failure: (source) => seen.push(source) }, source: 'sign-up limit' },
      'Sign-ups cannot be checked right now; please retry shortly.',
    );
    expect(seen).to.deep.equal(['sign-up limit']);
    expect(err.message).to.equal('Sign-ups cannot be checked right now; please retry shortly.');
    expect(err.code).to.equal('service_unavailable');
  });
});
