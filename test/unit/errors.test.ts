import { expect } from 'chai';
import { AppError, kindForStatus, validationError } from '../../src/errors.js';

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

  it("keeps an OpenAI type decided elsewhere instead of the kind's own", () => {
    const relayed = new AppError('unavailable', 'provider busy', {
      type: 'upstream_error',
      code: 'upstream_rate_limited',
    });
    expect(relayed.status).to.equal(503);
    expect(relayed.toBody()).to.deep.equal({
      error: { message: 'provider busy', type: 'upstream_error', code: 'upstream_rate_limited', param: null },
    });
  });

  it('gives a 422 an OpenAI error object beside detail, naming the first failing field as OpenAI names parameters', () => {
    const err = validationError([
      {
        loc: ['body', 'messages', 0, 'content'],
        msg: 'String should have at most 50000 characters',
        type: 'string_too_long',
      },
      { loc: ['body', 'n'], msg: 'Input should be less than or equal to 5', type: 'less_than_equal' },
    ]);
    expect(err.toBody()).to.deep.equal({
      detail: [
        {
          loc: ['body', 'messages', 0, 'content'],
          msg: 'String should have at most 50000 characters',
          type: 'string_too_long',
        },
        { loc: ['body', 'n'], msg: 'Input should be less than or equal to 5', type: 'less_than_equal' },
      ],
      error: {
        message: "Invalid 'messages[0].content': String should have at most 50000 characters (and 1 more: see detail)",
        type: 'invalid_request_error',
        code: 'string_too_long',
        param: 'messages[0].content',
      },
    });
  });
});
