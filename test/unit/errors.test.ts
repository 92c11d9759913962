import { expect } from 'chai';
import { AppError, kindForStatus } from '../../src/errors.js';

describe('errors', () => {
  it('maps a status back to the kind of error it stands for', () => {
    expect(kindForStatus(401)).to.equal('authentication');
    expect(kindForStatus(403)).to.equal('permission');
    expect(kindForStatus(422)).to.equal('validation');
    expect(kindForStatus(429)).to.equal('rate_limited');
    expect(kindForStatus(502)).to.equal('upstream');
    expect(kindForStatus(503)).to.equal('unavailable');
    expect(kindForStatus(418)).to.equal('invalid_request');
    expect(kindForStatus(504)).to.equal('internal');
  });

  it('keeps an OpenAI type decided elsewhere instead of the kind\'s own', () => {
    const relayed = new AppError('unavailable', 'provider busy', { type: 'upstream_error', code: 'upstream_rate_limited' });
    expect(relayed.status).to.equal(503);
    expect(relayed.toBody()).to.deep.equal({ error: { message: 'provider busy', type: 'upstream_error', code: 'upstream_rate_limited', param: null } });
  });
});
