import { expect } from 'chai';
import { relayTtls, runningTtlSeconds } from '../../src/chat/relay/protocol.js';
import { testConfig } from '../support/env.js';

describe('a running request’s lifetime in Redis', () => {
  it('is three times the upstream timeout', () => {
    expect(runningTtlSeconds(testConfig({ UPSTREAM_TIMEOUT_MS: '120000' }))).to.equal(360);
  });

  it('is at least three minutes when the upstream timeout is short, for the claim and the worker’s renewals alike', () => {
    const config = testConfig({ UPSTREAM_TIMEOUT_MS: '10000' });
    expect(runningTtlSeconds(config)).to.equal(180);
    // The worker's renewals (relayTtls) used to be timeout × 3 = 30 s, cutting short the 180 s its claim set.
    expect(relayTtls(config).runningSeconds).to.equal(180);
  });

  it('is the relay log’s lifetime once the request has ended', () => {
    expect(relayTtls(testConfig({ RELAY_LOG_TTL_SECONDS: '120' })).endedSeconds).to.equal(120);
  });
});
