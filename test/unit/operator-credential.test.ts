import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import {
  isOperatorSession,
  isOperatorToken,
  newOperatorSession,
  OPERATOR_SESSION_MS,
} from '../../src/http/admin/operator-credential.js';

const TOKEN = 'operator-token-0123456789abcdef0123456789';

describe('the operator credential of the queue dashboard', () => {
  it('takes the operator token and nothing else, whatever the length of the guess', () => {
    expect(isOperatorToken(TOKEN, TOKEN)).to.equal(true);
    for (const guess of ['', TOKEN.slice(0, -1), `${TOKEN}x`, TOKEN.toUpperCase()])
      expect(isOperatorToken(TOKEN, guess), guess).to.equal(false);
  });

  it('keeps a session for its lifetime and no longer', () => {
    const clock = new ManualClock();
    const session = newOperatorSession(TOKEN, clock);
    clock.advance(OPERATOR_SESSION_MS - 1000);
    expect(isOperatorSession(TOKEN, session, clock)).to.equal(true);
    clock.advance(1000);
    expect(isOperatorSession(TOKEN, session, clock)).to.equal(false);
  });

  it('refuses a session whose expiry was moved, and every session once the token changes', () => {
    const clock = new ManualClock();
    const session = newOperatorSession(TOKEN, clock);
    const [expires, mac] = session.split('.');
    expect(isOperatorSession(TOKEN, `${Number(expires) + 3600}.${mac}`, clock)).to.equal(false);
    expect(isOperatorSession(`${TOKEN}-rotated`, session, clock)).to.equal(false);
  });

  it('never carries the token in the cookie', () => {
    expect(newOperatorSession(TOKEN, new ManualClock())).not.to.contain(TOKEN);
  });
});
