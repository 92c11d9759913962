import { expect } from 'chai';
import { randomUUID } from 'node:crypto';
import { ManualClock } from '../../src/clock.js';
import type { Config } from '../../src/config.js';
import { createContext, type AppContext } from '../../src/context.js';
import { admissionError, type Admission } from '../../src/limits/limiter.service.js';
import { nanoUsdOf } from '../../src/usage/usage-cost.js';
import { createTestAccount } from '../support/accounts.js';
import { recordUsage } from '../support/billing.js';
import { isolatedPrefix, testConfig } from '../support/env.js';

// An API key's own monthly spending limit inside the admission script, beside the account's: the
// key's reservations and settled spend in the account's month hash, over real Redis (and Postgres
// for the ledger a key's month starts from). August 2017 is a month no other test uses.

const AUGUST = Date.parse('2017-08-15T12:00:00Z');
const MONTH = { key: '2017-08', start: new Date('2017-08-01T00:00:00Z'), end: new Date('2017-09-01T00:00:00Z') };
const usd = nanoUsdOf;

describe("an API key's own spending limit at admission", () => {
  let config: Config;
  let clock: ManualClock;
  let app: AppContext;

  beforeEach(async () => {
    // Paid limits far away, so only the spending limits refuse.
    config = testConfig({
      REDIS_PREFIX: isolatedPrefix(),
      PAID_REQUESTS_PER_MINUTE: '100000',
      PAID_REQUESTS_PER_HOUR: '1000000',
      PAID_REQUESTS_PER_DAY: '1000000',
      PAID_TOKENS_PER_DAY: '1000000000',
    });
    clock = new ManualClock(AUGUST);
    app = createContext(config, { role: 'web', clock });
    await app.warmUp([app.redis]);
  });
  afterEach(() => app.close());

  /** One request by key `keyId` (its own limit `keyLimit`), reserving `reserve` USD; the account has `accountLimit` or none. */
  const admit = (
    accountId: string,
    keyId: string,
    keyLimit: string | null,
    reserve: string,
    opts: { requestId?: string; accountLimit?: string } = {},
  ): Promise<Admission> =>
    app.limiter.admit({
      accountId,
      tier: 'paid',
      requestId: opts.requestId ?? randomUUID(),
      reserveTokens: 10,
      spend: {
        limitNanoUsd: opts.accountLimit ? usd(opts.accountLimit) : null,
        reserveNanoUsd: usd(reserve),
        admittedAt: clock.now().getTime(),
      },
      key: { id: keyId, ...(keyLimit ? { spendLimitNanoUsd: usd(keyLimit) } : {}) },
    });
  const settle = (accountId: string, keyId: string, requestId: string, cost: string) =>
    app.limiter.settle({
      accountId,
      keyId,
      requestId,
      actualTokens: 10,
      spend: { costNanoUsd: usd(cost), admittedAt: clock.now().getTime() },
    });
  const account = async () => (await createTestAccount(app, { tier: 'paid' })).account.id;
  const keySpend = (accountId: string, keyId: string) => app.limiter.monthSpend(accountId, MONTH, keyId);

  it("refuses a key past its own limit with 429 insufficient_quota naming the key's limit, while another key of the account still admits", async () => {
    const id = await account();
    const [capped, other] = [randomUUID(), randomUUID()];
    const request = randomUUID();
    expect((await admit(id, capped, '2.00', '1.99', { requestId: request })).allowed).to.equal(true);
    await settle(id, capped, request, '1.99');

    const refused = await admit(id, capped, '2.00', '0.05');
    expect(refused).to.deep.include({ allowed: false, reason: 'spend' });
    expect(refused.spend).to.deep.include({ limitNanoUsd: usd('2.00'), usedNanoUsd: usd('1.99'), ofKey: true });
    const err = admissionError(refused);
    expect(err.status).to.equal(429);
    expect(err.toBody()).to.deep.include({
      error: { message: err.message, type: 'insufficient_quota', code: 'insufficient_quota', param: null },
    });
    expect(err.message).to.equal(
      'This API key has reached its own monthly spending limit of $2.00: $0.01 of it is left this month (requests in flight included), and this request may cost up to $0.05. ' +
        "The limit resets at 2017-09-01T00:00Z (UTC). Raise or remove the key's limit (limits.monthly_spend_limit_usd) with PATCH /v1/keys/{id}, or use another key, or lower max_tokens.",
    );
    expect(err.headers).not.to.have.property('Retry-After');
    expect((await admit(id, other, null, '5.00')).allowed).to.equal(true);
  });

  it("holds every key's reservations in the account's limit too, which stays the ceiling across the keys", async () => {
    const id = await account();
    const [a, b] = [randomUUID(), randomUUID()];
    expect((await admit(id, a, '1.00', '0.80', { accountLimit: '1.50' })).allowed).to.equal(true);
    const refused = await admit(id, b, '1.00', '0.80', { accountLimit: '1.50' });
    expect(refused).to.deep.include({ allowed: false, reason: 'spend', heldInFlight: true });
    // The account's limit refused it, so the answer names the account's limit, not the key's.
    expect(refused.spend).to.deep.include({ limitNanoUsd: usd('1.50'), usedNanoUsd: usd('0.80') });
    expect(refused.spend).not.to.have.property('ofKey');
    expect((await admit(id, b, '1.00', '0.70', { accountLimit: '1.50' })).allowed).to.equal(true);
  });

  it('answers a refusal while requests of the key in flight hold the rest with a short Retry-After, saying so', async () => {
    const id = await account();
    const key = randomUUID();
    await admit(id, key, '1.00', '0.90');
    const refused = await admit(id, key, '1.00', '0.20');
    expect(refused).to.deep.include({ allowed: false, reason: 'spend', heldInFlight: true });
    const err = admissionError(refused);
    expect(err.headers['Retry-After']).to.equal('2');
    expect(err.message).to.match(
      /^Requests of this API key still in flight hold part of this API key's own monthly spending limit of \$1\.00/,
    );
  });

  it("replaces the key's reservation with the real cost when the request ends, and adds the cost to the key's month", async () => {
    const id = await account();
    const key = randomUUID();
    const request = randomUUID();
    await admit(id, key, '1.00', '0.90', { requestId: request });
    expect(await keySpend(id, key)).to.deep.equal({ spentNanoUsd: 0n, heldNanoUsd: usd('0.90') });
    await settle(id, key, request, '0.10');
    await settle(id, key, request, '0.10'); // a second settle of one request changes nothing
    expect(await keySpend(id, key)).to.deep.equal({ spentNanoUsd: usd('0.10'), heldNanoUsd: 0n });
    expect((await admit(id, key, '1.00', '0.90')).allowed).to.equal(true);
  });

  it("starts a key's month from the ledger's rows of that key, not the account's other keys'", async () => {
    const id = await account();
    const [key, other] = [randomUUID(), randomUUID()];
    // gpt-4.1 at $2.00/$8.00 per million: 450,000 completion tokens cost $3.60.
    await recordUsage(app, [
      {
        accountId: id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 0,
        completion: 450_000,
        at: '2017-08-02T10:00:00Z',
        keyId: key,
      },
      {
        accountId: id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 0,
        completion: 900_000,
        at: '2017-08-03T10:00:00Z',
        keyId: other,
      },
      // Last month's spend does not count against this month's limit.
      {
        accountId: id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 0,
        completion: 900_000,
        at: '2017-07-31T10:00:00Z',
        keyId: key,
      },
    ]);
    expect((await admit(id, key, '4.00', '0.41')).allowed).to.equal(false);
    expect(await keySpend(id, key)).to.deep.equal({ spentNanoUsd: usd('3.60'), heldNanoUsd: 0n });
    expect((await admit(id, key, '4.00', '0.40')).allowed).to.equal(true);
  });

  it("releases a key's reservation of a request that never settles once it expires", async () => {
    const id = await account();
    const key = randomUUID();
    await admit(id, key, '1.00', '1.00');
    expect((await admit(id, key, '1.00', '0.01')).allowed).to.equal(false);
    clock.advance(config.limits.reservationTtlMs + 1);
    expect((await admit(id, key, '1.00', '1.00')).allowed).to.equal(true);
    expect(await keySpend(id, key)).to.deep.equal({ spentNanoUsd: 0n, heldNanoUsd: usd('1.00') });
  });

  it("admitting the same request again replaces the key's reservation instead of holding two", async () => {
    const id = await account();
    const key = randomUUID();
    const request = randomUUID();
    await admit(id, key, '1.00', '0.60', { requestId: request });
    await admit(id, key, '1.00', '0.30', { requestId: request });
    expect(await keySpend(id, key)).to.deep.equal({ spentNanoUsd: 0n, heldNanoUsd: usd('0.30') });
  });

  it("counts a key's spend settled before its limit was set once the limit seeds the key's month", async () => {
    const id = await account();
    const key = randomUUID();
    const request = randomUUID();
    // Without a limit the key's month is not kept in Redis: the ledger is where it starts from.
    await admit(id, key, null, '0.50', { requestId: request });
    await settle(id, key, request, '0.50');
    expect(await keySpend(id, key)).to.equal(undefined);
    await recordUsage(app, [
      {
        accountId: id,
        model: 'gpt-4.1',
        tier: 'paid',
        prompt: 0,
        completion: 62_500,
        at: '2017-08-15T11:00:00Z',
        keyId: key,
      },
    ]);
    expect((await admit(id, key, '1.00', '0.51')).allowed).to.equal(false);
    expect(await keySpend(id, key)).to.deep.equal({ spentNanoUsd: usd('0.50'), heldNanoUsd: 0n });
  });
});
