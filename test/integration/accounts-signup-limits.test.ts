import { expect } from 'chai';
import { clientNetworkKey, mailboxKey } from '../../src/accounts/signup-limits.js';
import { closeOutboxFor, createTestAccount } from '../support/accounts.js';
import { isolatedPrefix, randomId, uniqueEmail } from '../support/env.js';
import { eventually, post } from '../support/http.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

describe('sign-up limits: no mailbox flooded, no client signing up without end', () => {
  describe('keys', () => {
    it('counts an address by its mailbox: letter case and a +tag are the same mailbox', () => {
      expect(mailboxKey('Ada+one@Example.com')).to.equal(mailboxKey('ada@example.com'));
      expect(mailboxKey('ada+two@example.com')).to.equal(mailboxKey('ADA@EXAMPLE.COM'));
      expect(mailboxKey('bob@example.com')).not.to.equal(mailboxKey('ada@example.com'));
    });

    it('counts a Gmail address as one mailbox whatever dots its name holds, at either Google domain', () => {
      expect(mailboxKey('a.d.a@gmail.com')).to.equal(mailboxKey('ada@gmail.com'));
      expect(mailboxKey('A.da+x@GoogleMail.com')).to.equal(mailboxKey('ada@gmail.com'));
      expect(mailboxKey('a.da@example.com')).not.to.equal(mailboxKey('ada@example.com'));
    });

    it('counts an internationalised domain as one mailbox however it is spelled (Unicode or punycode)', () => {
      expect(mailboxKey('ada@exämple.com')).to.equal(mailboxKey('Ada+x@XN--EXMPLE-CUA.com'));
      expect(mailboxKey('ada@EXÄMPLE.com')).to.equal(mailboxKey('ada@exämple.com'));
      expect(mailboxKey('ada@exämple.com')).not.to.equal(mailboxKey('ada@example.com'));
    });

    it('counts a client by its IPv4 address, or by the /64 of its IPv6 address', () => {
      expect(clientNetworkKey('203.0.113.7')).to.equal('203.0.113.7');
      expect(clientNetworkKey('::ffff:203.0.113.7')).to.equal('203.0.113.7');
      expect(clientNetworkKey('2001:db8:1:2:aaaa::1')).to.equal(clientNetworkKey('2001:db8:1:2:ffff:ffff:ffff:ffff'));
      expect(clientNetworkKey('2001:db8:1:3::1')).not.to.equal(clientNetworkKey('2001:db8:1:2::1'));
    });
  });

  describe('through the endpoint', () => {
    let web: TestWeb;
    const used: string[] = [];
    // Behind a proxy (TRUST_PROXY), each test is its own client through X-Forwarded-For.
    // A fresh address per call: random ones from one /24 collided now and then, so a test's client
    // inherited sign-ups another test had made from the same address.
    let nextHost = 0;
    const clientIp = () => `198.51.${100 + Math.floor(nextHost / 250)}.${(nextHost++ % 250) + 1}`;
    const signup = (address: string, ip: string, forwardedFor = ip) => {
      used.push(address);
      return post(
        `${web.url}/v1/auth/signup`,
        { name: 'Ada', email: address, organization: 'Engines' },
        { headers: { 'x-forwarded-for': forwardedFor } },
      );
    };
    const emailsTo = async (addresses: string[]) =>
      web.app.db
        .selectFrom('email_outbox')
        .select('id')
        .where((eb) =>
          eb(
            eb.fn('lower', ['to_address']),
            'in',
            addresses.map((a) => a.toLowerCase()),
          ),
        )
        .execute();

    before(async () => {
      web = await startTestWeb({
        env: {
          REDIS_PREFIX: isolatedPrefix(),
          TRUST_PROXY: 'true',
          SIGNUP_PER_ADDRESS_PER_HOUR: '3',
          SIGNUP_PER_CLIENT_PER_HOUR: '5',
        },
      });
    });
    after(async () => {
      await closeOutboxFor(web.app, used);
      await web.close();
    });

    it('refuses a fourth sign-up for one mailbox within the hour, so at most three emails go to it', async () => {
      const local = `flood.${randomId()}`;
      const variants = [
        `${local}@example.com`,
        `${local.toUpperCase()}@example.com`,
        `${local}+a@example.com`,
        `${local}+b@example.com`,
      ];
      const statuses: number[] = [];
      for (const address of variants) statuses.push((await signup(address, clientIp())).status);
      expect(statuses).to.deep.equal([200, 200, 200, 429]);
      expect(await emailsTo(variants)).to.have.length(3);
    });

    it('limits an internationalised mailbox the same way, whichever spelling of its domain each sign-up uses', async () => {
      const local = `flood.${randomId()}`;
      const variants = [
        `${local}@exämple.com`,
        `${local}@XN--EXMPLE-CUA.com`,
        `${local}+a@exämple.com`,
        `${local}+b@exämple.com`,
      ];
      const statuses: number[] = [];
      for (const address of variants) statuses.push((await signup(address, clientIp())).status);
      expect(statuses).to.deep.equal([200, 200, 200, 429]);
      expect(await emailsTo(variants)).to.have.length(3);
    });

    it('limits a Gmail mailbox the same way, whatever dots its name is spelled with', async () => {
      const name = `flood${randomId()}`.replace(/[^a-z0-9]/gi, '').toLowerCase();
      const variants = [
        `${name}@gmail.com`,
        `${name.slice(0, 3)}.${name.slice(3)}@gmail.com`,
        `${name.slice(0, 1)}.${name.slice(1, 5)}.${name.slice(5)}+x@googlemail.com`,
        `${name.split('').join('.')}@gmail.com`,
      ];
      const statuses: number[] = [];
      for (const address of variants) statuses.push((await signup(address, clientIp())).status);
      expect(statuses).to.deep.equal([200, 200, 200, 429]);
      expect(await emailsTo(variants)).to.have.length(3);
    });

    it('answers the refusal with x-should-retry: false, the reset time and no Retry-After (the wait is up to an hour)', async () => {
      const address = uniqueEmail('limited');
      for (let i = 0; i < 3; i++) expect((await signup(address, clientIp())).status).to.equal(200);
      const r = await signup(address, clientIp());
      expect(r.status).to.equal(429);
      expect(r.headers.get('retry-after')).to.equal(null);
      expect(r.headers.get('x-should-retry')).to.equal('false');
      expect(r.body.error).to.include({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded' });
      expect(r.body.error.message).to.match(
        /^Too many sign-up attempts for this email address or from your network\. Try again at \S+Z \(in (\d+ min|1 h 0 min)\)\.$/,
      );
    });

    it('gives a known address and an unknown one the same refusal', async () => {
      const known = (await createTestAccount(web.app)).account.email;
      const unknown = uniqueEmail('unknown');
      const refusals = [];
      for (const address of [known, unknown]) {
        for (let i = 0; i < 3; i++) await signup(address, clientIp());
        refusals.push(await signup(address, clientIp()));
      }
      const [a, b] = refusals.map((r) => ({
        status: r.status,
        body: JSON.stringify(r.body).replace(/at \S+Z \(in [^)]*\)/, 'at …'),
      }));
      expect(a).to.deep.equal(b);
      expect(a!.status).to.equal(429);
    });

    it('refuses a sixth sign-up from one client network within the hour, whatever the addresses, and no other client', async () => {
      const ip = clientIp();
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) statuses.push((await signup(uniqueEmail('client'), ip)).status);
      expect(statuses).to.deep.equal([200, 200, 200, 200, 200, 429]);
      expect((await signup(uniqueEmail('other'), `203.0.113.${Math.floor(Math.random() * 250) + 1}`)).status).to.equal(
        200,
      );
    });

    it('trusts only the X-Forwarded-For entry the proxy added, so a client cannot rotate the ones before it', async () => {
      const ip = clientIp();
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++)
        statuses.push((await signup(uniqueEmail('spoof'), ip, `10.0.0.${i + 1}, ${ip}`)).status);
      expect(statuses.at(-1)).to.equal(429);
    });
  });

  it('answers 503 with Retry-After when Redis cannot count sign-ups, and sends nothing', async () => {
    const redisUrl = new URL(process.env.REDIS_URL!);
    const proxy = await new TcpProxy(redisUrl.hostname, Number(redisUrl.port || 6379)).start();
    const web = await startTestWeb({ env: { REDIS_URL: proxy.url('redis'), REDIS_PREFIX: isolatedPrefix() } });
    try {
      await proxy.cut();
      await eventually(
        async () => (web.app.redis.status !== 'ready' ? true : undefined),
        'the client to notice the outage',
      );
      const address = uniqueEmail('outage');
      const r = await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email: address, organization: 'Engines' });
      expect(r.status).to.equal(503);
      expect(r.headers.get('retry-after')).to.equal('5');
      const rows = await web.app.db.selectFrom('accounts').select('id').where('email', '=', address).execute();
      expect(rows).to.have.length(0);
    } finally {
      await web.close();
      await proxy.cut();
    }
  });
});
