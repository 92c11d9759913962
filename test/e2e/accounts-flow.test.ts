import { expect } from 'chai';
import OpenAI from 'openai';
import { createContext, type AppContext } from '../../src/context.js';
import { mintJwt } from '../../src/accounts/jwt.js';
import { FakePostmark } from '../fakes/postmark.js';
import { closeOutboxFor, verificationLinkIn } from '../support/accounts.js';
import { testConfig, uniqueEmail } from '../support/env.js';
import { eventually, get, post } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';

/**
 * The whole account flow over real processes: two web instances and a worker, with Postmark
 * replaced by a local fake that the real postmark client (in the worker) talks to.
 */
describe('sign-up to first completion to key regeneration, across two web processes and a worker', function () {
  this.timeout(60_000);
  let fake: FakePostmark;
  let app: AppContext;
  let web1: RoleProcess;
  let web2: RoleProcess;
  let worker: RoleProcess;
  const email = uniqueEmail('flow');
  let firstKey = '';
  let secondKey = '';

  before(async () => {
    fake = await new FakePostmark().start();
    const env = {
      ...fake.env(),
      JWT_SECRET: 'flow-test-secret-0123456789-abcdefghijk',
      LOCAL_MODEL_TTFT_MS: '0',
      LOCAL_MODEL_TOKENS_PER_SECOND: '5000',
    };
    app = createContext(testConfig(env), { role: 'test' });
    [web1, web2, worker] = await Promise.all([startRole('web', env), startRole('web', env), startRole('worker', env)]);
  });
  after(async () => {
    await Promise.all([web1?.stop(), web2?.stop(), worker?.stop()]);
    await closeOutboxFor(app, [email]);
    await app?.close();
    await fake?.close();
  });

  const chat = (url: string, apiKey: string) =>
    new OpenAI({ apiKey, baseURL: `${url}/v1`, maxRetries: 0 }).chat.completions.create({
      model: 'gemini-2.5-flash',
      messages: [{ role: 'user', content: 'Say hello' }],
      max_tokens: 16,
    });

  it('signs up on one web process and the worker emails the verification link through Postmark', async () => {
    const r = await post(`${web1.url}/v1/auth/signup`, { name: 'Ada Lovelace', email, organization: 'Engines Ltd' });
    expect(r.status).to.equal(200);
    expect(r.body.email).to.equal(email);
    const [message] = await eventually(
      async () => (fake.accepted(email).length ? fake.accepted(email) : undefined),
      'the verification email to reach Postmark',
    );
    expect(message!.Subject).to.equal('Verify your email address');
    expect(verificationLinkIn(message!.TextBody!).link).to.include('/v1/auth/verify?token=');
  });

  it('verifies on the other web process and gets the API key', async () => {
    const { token } = verificationLinkIn(fake.accepted(email)[0]!.TextBody!);
    const r = await get(`${web2.url}/v1/auth/verify?token=${token}`, { headers: { accept: 'application/json' } });
    expect(r.status).to.equal(200);
    expect(r.body.email).to.equal(email);
    firstKey = r.body.api_key;
    expect(firstKey).to.match(/^sk-svc-/);
  });

  it('makes a first chat completion with the key through the official OpenAI SDK', async () => {
    const completion = await chat(web1.url, firstKey);
    expect(completion.object).to.equal('chat.completion');
    expect(completion.choices[0]!.message.content).to.be.a('string').that.is.not.empty;
  });

  it('regenerates the key with a JWT; the old key is refused at once by the other web process, the new one works there', async () => {
    const account = await app.db
      .selectFrom('accounts')
      .selectAll()
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    const jwt = await mintJwt(app.config, app.clock, { sub: account.id, email });
    // The other process has the old key in its cache from here on (the first use ties the key to
    // its account, the second caches the account).
    for (let i = 0; i < 2; i++) expect((await chat(web2.url, firstKey)).object).to.equal('chat.completion');
    const r = await post(`${web1.url}/v1/auth/regenerate-api-key`, undefined, { bearer: jwt });
    expect(r.status).to.equal(200);
    secondKey = r.body.api_key;
    expect(secondKey)
      .to.match(/^sk-svc-/)
      .and.not.equal(firstKey);

    const refused = await chat(web2.url, firstKey).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(refused).to.be.instanceOf(OpenAI.AuthenticationError);
    expect((refused as InstanceType<typeof OpenAI.AuthenticationError>).code).to.equal('invalid_api_key');
    expect((await chat(web2.url, secondKey)).object).to.equal('chat.completion');
  });

  it('refuses a second regeneration within 2 hours with 429 and the reset time, on either process', async () => {
    const account = await app.db
      .selectFrom('accounts')
      .selectAll()
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    const jwt = await mintJwt(app.config, app.clock, { sub: account.id, email });
    const r = await post(`${web2.url}/v1/auth/regenerate-api-key`, undefined, { bearer: jwt });
    expect(r.status).to.equal(429);
    expect(r.headers.get('retry-after')).to.equal(null);
    expect(r.headers.get('x-should-retry')).to.equal('false');
    expect(Number(r.headers.get('x-ratelimit-reset'))).to.be.within(7000, 7200);
    expect(r.body.error.type).to.equal('rate_limit_exceeded');
    expect((await chat(web1.url, secondKey)).object).to.equal('chat.completion');
  });
});
