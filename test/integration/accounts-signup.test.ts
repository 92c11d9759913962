import { createHash } from 'node:crypto';
import { expect } from 'chai';
import { randomId, uniqueEmail } from '../support/env.js';
import { post } from '../support/http.js';
import { closeOutboxFor, createTestAccount, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

describe('POST /v1/auth/signup', () => {
  let web: TestWeb;
  const used: string[] = [];
  const email = (tag = 'signup') => {
    const e = uniqueEmail(tag);
    used.push(e);
    return e;
  };
  const signup = (address: string, extra: Record<string, unknown> = {}) =>
    post(`${web.url}/v1/auth/signup`, { name: 'Ada Lovelace', email: address, organization: 'Engines Ltd', ...extra });
  const accountsWith = async (address: string) =>
    web.app.db
      .selectFrom('accounts')
      .selectAll()
      .where((eb) => eb(eb.fn('lower', ['email']), '=', address.toLowerCase()))
      .execute();
  const tokensOf = async (accountId: string) =>
    web.app.db
      .selectFrom('email_verification_tokens')
      .selectAll()
      .where('account_id', '=', accountId)
      .orderBy('created_at')
      .execute();
  const emailsTo = async (address: string) =>
    web.app.db
      .selectFrom('email_outbox')
      .selectAll()
      .where((eb) => eb(eb.fn('lower', ['to_address']), '=', address.toLowerCase()))
      .orderBy('id')
      .execute();

  before(async () => {
    web = await startTestWeb({ env: { PUBLIC_BASE_URL: 'https://api.example.test' } });
  });
  after(async () => {
    await closeOutboxFor(web.app, used);
    await web.close();
  });

  it('creates an unverified free-tier account and answers with a message and the address', async () => {
    const address = email();
    const r = await signup(address);
    expect(r.status).to.equal(200);
    expect(r.body).to.deep.equal({ message: r.body.message, email: address });
    expect(r.body.message)
      .to.match(/created/i)
      .and.to.match(/email/i);
    const [account, more] = await accountsWith(address);
    expect(more).to.equal(undefined);
    expect(account).to.include({
      name: 'Ada Lovelace',
      email: address,
      organization: 'Engines Ltd',
      tier: 'free',
      verified_at: null,
    });
  });

  it('queues a verification email carrying a link to the verify endpoint, and stores only the token hash', async () => {
    const address = email();
    await signup(address);
    const [account] = await accountsWith(address);
    const message = await latestEmailTo(web.app, address);
    expect(message).to.include({ kind: 'verification', status: 'pending' });
    const { link, token } = verificationLinkIn(message!.text_body);
    expect(link).to.match(/^https:\/\/api\.example\.test\/v1\/auth\/verify\?token=/);
    expect(token).to.match(/^[A-Za-z0-9_-]{43}$/);
    expect(message!.html_body).to.include(link);
    const tokens = await tokensOf(account!.id);
    expect(tokens).to.have.length(1);
    expect(tokens[0]!.token_hash).to.equal(sha256(token));
    expect(JSON.stringify(tokens)).not.to.include(token);
  });

  it('sets the link to expire after the configured time (24 hours by default)', async () => {
    const address = email();
    await signup(address);
    const [account] = await accountsWith(address);
    const [token] = await tokensOf(account!.id);
    expect(token!.expires_at.getTime() - token!.created_at.getTime()).to.be.closeTo(24 * 3_600_000, 5_000);
  });

  it('answers 422 with the interface body for a missing field', async () => {
    const r = await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email: email() });
    expect(r.status).to.equal(422);
    expect(r.body).to.deep.equal({
      detail: [{ loc: ['body', 'organization'], msg: 'Field required', type: 'missing' }],
      error: {
        message: "Invalid 'organization': Field required",
        type: 'invalid_request_error',
        code: 'missing',
        param: 'organization',
      },
    });
  });

  it('answers 422 for a malformed email address', async () => {
    const r = await signup('not-an-email');
    expect(r.status).to.equal(422);
    expect(r.body.detail).to.deep.equal([
      {
        loc: ['body', 'email'],
        msg: 'value is not a valid email address: it needs a mailbox name, an @ and a domain, as in ada@example.com',
        type: 'value_error',
      },
    ]);
  });

  it('accepts an address at an internationalised domain (x@exämple.com, x@例え.jp) and queues its link to it', async () => {
    for (const domain of ['exämple.com', '例え.jp', 'XN--EXMPLE-CUA.com']) {
      const address = `ada.${randomId()}@${domain}`;
      used.push(address);
      const r = await signup(address);
      expect(r.status, domain).to.equal(200);
      expect(r.body.email).to.equal(address);
      expect(await accountsWith(address)).to.have.length(1);
      expect((await emailsTo(address)).map((m) => m.kind)).to.deep.equal(['verification']);
    }
  });

  it('refuses a mailbox name outside ASCII (ädä@example.com) with a 422 that says the mail provider cannot deliver to it', async () => {
    const address = `ädä.${randomId()}@example.com`;
    const r = await signup(address);
    expect(r.status).to.equal(422);
    expect(r.body.detail).to.have.length(1);
    expect(r.body.detail[0])
      .to.include({ type: 'value_error' })
      .and.to.deep.include({ loc: ['body', 'email'] });
    expect(r.body.detail[0].msg).to.match(/^value is not a valid email address: the part before the @ must be ASCII/);
    expect(r.body.detail[0].msg).to.match(/mail provider cannot deliver/);
    expect(r.body.error.message).to.include('before the @ must be ASCII');
    expect(await accountsWith(address)).to.have.length(0);
  });

  it('refuses an address whose domain is not a domain name, saying which part is wrong', async () => {
    for (const address of ['ada@example', 'ada@exa mple.com', 'ada@-example.com', 'ada@ex_ample.com']) {
      const r = await signup(address);
      expect(r.status, address).to.equal(422);
      expect(r.body.detail[0].msg, address).to.equal(
        'value is not a valid email address: the part after the @ is not a domain name',
      );
    }
  });

  it('answers 422 for a name or an organization over 100 characters, and accepts exactly 100', async () => {
    const long = await signup(email(), { name: 'n'.repeat(101), organization: 'o'.repeat(101) });
    expect(long.status).to.equal(422);
    expect(long.body.detail.map((d: { loc: unknown[] }) => d.loc)).to.deep.equal([
      ['body', 'name'],
      ['body', 'organization'],
    ]);
    expect(long.body.detail[0].type).to.equal('string_too_long');
    const exact = await signup(email(), { name: 'n'.repeat(100), organization: 'o'.repeat(100) });
    expect(exact.status).to.equal(200);
  });

  describe('refuses characters Postgres or an email cannot carry, at the field', () => {
    const refused = async (fields: Record<string, unknown>) => {
      const address = (fields.email as string | undefined) ?? email();
      const r = await signup(address, fields);
      expect(r.status).to.equal(422);
      expect(await accountsWith(address)).to.have.length(0);
      return r.body.detail as { loc: (string | number)[]; msg: string; type: string }[];
    };

    it('refuses a NUL character in the name or the organization (Postgres cannot store it)', async () => {
      const detail = await refused({ name: 'Ada\u0000Lovelace', organization: 'Engines\u0000' });
      expect(detail).to.deep.equal([
        {
          loc: ['body', 'name'],
          msg: 'String should not contain control characters (U+0000 at position 3)',
          type: 'value_error',
        },
        {
          loc: ['body', 'organization'],
          msg: 'String should not contain control characters (U+0000 at position 7)',
          type: 'value_error',
        },
      ]);
    });

    it('refuses CR, LF, tab and other control characters in a name (they would land in the email)', async () => {
      for (const name of [
        'Ada\r\nBcc: victim@example.com',
        'Ada\tLovelace',
        'Ada\u001b[31m',
        'Ada\u007f',
        'Ada\u0085',
      ]) {
        const detail = await refused({ name });
        expect(detail.map((d) => d.loc)).to.deep.equal([['body', 'name']]);
      }
    });

    it('refuses a lone surrogate in any field (it is not Unicode)', async () => {
      const detail = await refused({ name: 'Ada \ud800', organization: '\udfff Ltd' });
      expect(detail).to.deep.equal([
        {
          loc: ['body', 'name'],
          msg: 'String should be valid Unicode (it holds a lone surrogate)',
          type: 'string_unicode',
        },
        {
          loc: ['body', 'organization'],
          msg: 'String should be valid Unicode (it holds a lone surrogate)',
          type: 'string_unicode',
        },
      ]);
    });

    it('refuses an empty or whitespace-only name or organization', async () => {
      const detail = await refused({ name: '', organization: ' \u00a0\u3000 ' });
      expect(detail.map((d) => [d.loc, d.type])).to.deep.equal([
        [['body', 'name'], 'string_too_short'],
        [['body', 'organization'], 'string_too_short'],
      ]);
    });

    it('keeps accepting names in any script, with accents, spaces and emoji', async () => {
      const address = email();
      const r = await signup(address, { name: 'Zoë 李 Ωmega 🚀', organization: 'Société Générale d’Analyse' });
      expect(r.status).to.equal(200);
      const [account] = await accountsWith(address);
      expect(account).to.include({ name: 'Zoë 李 Ωmega 🚀', organization: 'Société Générale d’Analyse' });
    });
  });

  it('answers 422 when there is no body at all', async () => {
    const r = await post(`${web.url}/v1/auth/signup`);
    expect(r.status).to.equal(422);
    expect(r.body.detail[0].loc).to.deep.equal(['body']);
  });

  it('answers a repeated sign-up (in another letter case) exactly like a new one and creates no second account', async () => {
    const address = email();
    const first = await signup(address);
    const again = await signup(address.toUpperCase(), { name: 'Mallory', organization: 'Evil Corp' });
    expect(again.status).to.equal(200);
    expect(again.body).to.deep.equal({ message: first.body.message, email: address.toUpperCase() });
    const accounts = await accountsWith(address);
    expect(accounts).to.have.length(1);
    // An unauthenticated caller does not get to rename someone's account.
    expect(accounts[0]).to.include({ name: 'Ada Lovelace', organization: 'Engines Ltd', email: address });
  });

  it('emails an unverified account a fresh link on a repeated sign-up, to the address on file', async () => {
    const address = email();
    await signup(address);
    await signup(address.toUpperCase());
    const [account] = await accountsWith(address);
    const tokens = await tokensOf(account!.id);
    expect(tokens).to.have.length(2);
    const emails = await emailsTo(address);
    expect(emails.map((e) => e.kind)).to.deep.equal(['verification', 'verification']);
    expect(emails.every((e) => e.to_address === address)).to.equal(true);
    const links = emails.map((e) => verificationLinkIn(e.text_body).token);
    expect(links[0]).not.to.equal(links[1]);
  });

  it('sends a verified account an "already have an account" email with no link and no key, and changes nothing', async () => {
    const address = email();
    const { account } = await createTestAccount(web.app, { email: address });
    const r = await signup(address.toUpperCase());
    expect(r.status).to.equal(200);
    expect(Object.keys(r.body).sort()).to.deep.equal(['email', 'message']);
    expect(await tokensOf(account.id)).to.have.length(0);
    const [message, more] = await emailsTo(address);
    expect(more).to.equal(undefined);
    expect(message!.kind).to.equal('account_exists');
    expect(message!.text_body).not.to.match(/token=|sk-svc-/);
    const keys = await web.app.db.selectFrom('api_keys').selectAll().where('account_id', '=', account.id).execute();
    expect(keys).to.have.length(1);
    expect(keys[0]!.revoked_at).to.equal(null);
  });

  it('creates exactly one account when sign-ups for one address race, and answers each with 200', async () => {
    const address = email('race');
    const variants = [
      address,
      address.toUpperCase(),
      address,
      `${address[0]!.toUpperCase()}${address.slice(1)}`,
      address,
      address.toUpperCase(),
      address,
      address,
    ];
    const results = await Promise.all(variants.map((v) => signup(v)));
    expect(results.map((r) => r.status)).to.deep.equal(variants.map(() => 200));
    expect(await accountsWith(address)).to.have.length(1);
    expect(await emailsTo(address)).to.have.length(variants.length);
  });
});
