import { createHash } from 'node:crypto';
import path from 'node:path';
import { expect } from 'chai';
import OpenAI from 'openai';
import type { Page } from 'playwright-core';
import { FakePostmark } from '../fakes/postmark.js';
import { FakeStripe } from '../fakes/stripe.js';
import { closeOutboxFor, latestEmailTo, verificationLinkIn } from '../support/accounts.js';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { recordPage, settled } from '../support/console-page.js';
import { uniqueEmail } from '../support/env.js';
import { eventually } from '../support/http.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// Issue 32's journey in a real browser (Debian's Chromium through playwright-core), through the
// real web tier and a completion worker: sign up in the browser, land signed in with the default
// key shown once, create a second key on the Keys page, make completions with both through the
// openai SDK, see usage by key, revoke the second key (the SDK gets 401 with it at once), and close
// the account. Every page at 375 and 1280 px with axe-core; screenshots go to CONSOLE_SHOTS_DIR
// (var/console-screenshots/ by default).

const SHOTS = path.resolve(process.env.CONSOLE_SHOTS_DIR ?? path.join('var', 'console-screenshots'));
const FAST = { LOCAL_MODEL_TTFT_MS: '0', LOCAL_MODEL_TOKENS_PER_SECOND: '5000' };
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

describe('the keys journey in a real browser: sign up, two keys, usage by key, revoke, close', function () {
  this.timeout(180_000);
  let stripe: FakeStripe;
  let postmark: FakePostmark;
  let web: TestWeb;
  let worker: RoleProcess;
  let browser: TestBrowser;
  const emails: string[] = [];

  before(async () => {
    stripe = await new FakeStripe().start();
    postmark = await new FakePostmark().start();
    // A fixed port, so the links in the emails name this very server, as in production.
    const probe = await startTestWeb();
    const port = new URL(probe.url).port;
    await probe.close();
    web = await startTestWeb({
      env: { ...stripe.env(), ...FAST, PORT: port, PUBLIC_BASE_URL: `http://127.0.0.1:${port}` },
    });
    worker = await startRole('worker', { ...stripe.env(), ...postmark.env(), ...FAST });
    browser = await launchBrowser({ permissions: ['clipboard-read', 'clipboard-write'] });
  });
  after(async () => {
    await browser?.close();
    await worker?.stop();
    await closeOutboxFor(web.app, emails);
    await web?.close();
    await postmark?.close();
    await stripe?.close();
  });

  /**
   * The newest email to `email` once it carries a link to `path`: from the outbox while it waits
   * there, or as the fake Postmark received it once the worker has sent it (a sent row keeps no
   * usable link).
   */
  async function mailWithLink(email: string, path: string): Promise<string> {
    return eventually(async () => {
      const queued = await latestEmailTo(web.app, email);
      if (!queued?.text_body.includes(path)) return undefined;
      if (queued.status === 'pending') return queued.text_body;
      return postmark.accepted(email).at(-1)?.TextBody;
    }, `the email with a link to ${path}`);
  }

  /** The secret the page shows once. */
  const shownKey = async (page: Page) => (await page.locator('#api-key').textContent())!.trim();

  /** A short completion through the openai SDK with `key`, as a program holding it makes one. */
  const complete = (key: string) =>
    new OpenAI({ apiKey: key, baseURL: `${web.url}/v1`, maxRetries: 0 }).chat.completions.create({
      model: 'gemini-2.5-flash',
      messages: [{ role: 'user', content: 'Say hi.' }],
      max_tokens: 16,
    });

  it('signs up, creates a second key, uses both, sees usage by key, revokes one and closes the account', async () => {
    const email = uniqueEmail('keys-journey');
    emails.push(email);
    await browser.context.clearCookies();
    const page = await browser.context.newPage();

    // 1. Sign up in the browser: name, email, organisation.
    await page.goto(`${web.url}/console/sign-up`);
    await settled(page);
    await page.getByLabel('Your name').fill('Ada Lovelace');
    await page.getByLabel('Email address').fill(email);
    await page.getByLabel('Organisation').fill('Analytical Engines');
    await page.getByRole('button', { name: 'Sign up' }).click();
    await page.getByRole('heading', { name: 'Check your email' }).waitFor();

    // 2. The emailed link lands signed in on the Keys page, the default key shown once.
    const { link } = verificationLinkIn(await mailWithLink(email, '/v1/auth/verify'));
    await page.goto(link);
    await page.getByRole('button', { name: 'Verify and show my API key' }).click();
    await page.locator('#api-key').waitFor();
    expect(page.url()).to.equal(`${web.url}/console/keys`);
    const defaultKey = await shownKey(page);
    const account = await web.app.db
      .selectFrom('accounts')
      .select(['id', 'name', 'organization'])
      .where('email', '=', email)
      .executeTakeFirstOrThrow();
    expect(account).to.deep.include({ name: 'Ada Lovelace', organization: 'Analytical Engines' });
    const keyRow = (key: string) =>
      web.app.db
        .selectFrom('api_keys')
        .select(['id', 'account_id', 'name', 'is_default', 'revoked_at'])
        .where('key_hash', '=', sha256(key))
        .executeTakeFirstOrThrow();
    expect(await keyRow(defaultKey)).to.deep.include({ account_id: account.id, is_default: true, revoked_at: null });
    await recordPage(page, SHOTS, 'journey-keys-verified');

    // 3. A second key, for another program, from the Keys page: its secret shown once.
    await page.getByRole('button', { name: 'Create a key' }).click();
    await page.getByLabel('Name').fill('Batch job');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.locator('#new-key', { hasText: 'Batch job' }).waitFor();
    const batchKey = await shownKey(page);
    expect(batchKey).not.to.equal(defaultKey);
    const batchRow = await keyRow(batchKey);
    expect(batchRow).to.deep.include({ account_id: account.id, name: 'Batch job', is_default: false });
    const defaultRow = await keyRow(defaultKey);
    await recordPage(page, SHOTS, 'journey-keys-two');

    // 4. Completions with both keys through the openai SDK.
    for (const key of [defaultKey, batchKey]) {
      const answer = await complete(key);
      expect(answer.choices[0]!.message.content).to.be.a('string').and.not.equal('');
    }
    // The ledger names the key that made each request.
    const perKey = await eventually(async () => {
      const rows = await web.app.db
        .selectFrom('usage_events')
        .select(['key_id'])
        .where('account_id', '=', account.id)
        .execute();
      return rows.length === 2 ? rows.map((r) => r.key_id).sort() : undefined;
    }, 'both requests in the ledger');
    expect(perKey).to.deep.equal([defaultRow.id, batchRow.id].sort());

    // 5. USAGE BY KEY. The Usage page's per-key section: both keys named, each with its one request.
    await page.getByRole('link', { name: 'Usage', exact: true }).click();
    await page.waitForURL(`${web.url}/console/usage`);
    await settled(page);
    if (await page.locator('.chart').count()) await page.locator('.chart canvas').first().waitFor();
    await page.getByRole('heading', { name: 'By key' }).waitFor();
    for (const [row, name] of [
      [defaultRow, 'Default'],
      [batchRow, 'Batch job'],
    ] as const) {
      const line = page.locator(`#usage-by-key tr[data-key-id="${row.id}"]`);
      expect(await line.locator('[data-field="name"]').innerText()).to.match(new RegExp(`^${name}`));
      expect(await line.locator('[data-field="requests"]').innerText()).to.equal('1');
    }
    await recordPage(page, SHOTS, 'journey-usage-by-key');
    // The Keys page shows when each key was last used, once recorded (to the minute).
    await eventually(async () => {
      const rows = await web.app.db
        .selectFrom('api_keys')
        .select('last_used_at')
        .where('account_id', '=', account.id)
        .where('revoked_at', 'is', null)
        .execute();
      return rows.length === 2 && rows.every((r) => r.last_used_at !== null) ? true : undefined;
    }, 'both keys’ last use recorded');
    await page.getByRole('link', { name: 'Keys' }).click();
    await page.waitForURL(`${web.url}/console/keys`);
    await settled(page);
    expect(await page.locator('[data-field="last-used"]').allTextContents()).not.to.include('never');
    await recordPage(page, SHOTS, 'journey-keys-used');

    // 6. Revoke the second key after the confirmation: the SDK gets 401 with it at once, the default key still works.
    await page.getByRole('button', { name: 'Revoke… “Batch job”' }).click();
    await page.getByRole('dialog', { name: 'Revoke “Batch job”?' }).getByRole('button', { name: 'Revoke key' }).click();
    await page.getByRole('status').filter({ hasText: 'Key “Batch job” revoked' }).waitFor();
    const refused = await complete(batchKey).catch((err: unknown) => err);
    expect(refused).to.be.an.instanceOf(OpenAI.AuthenticationError);
    expect((refused as InstanceType<typeof OpenAI.AuthenticationError>).status).to.equal(401);
    expect((await complete(defaultKey)).choices).to.have.length(1);
    await page.locator('.key-list > li h3', { hasText: 'Batch job' }).waitFor({ state: 'detached' });
    expect(await page.locator('.key-list > li h3').allTextContents()).to.deep.equal(['Default']);
    await recordPage(page, SHOTS, 'journey-keys-revoked');

    // 7. Close the account on the Account page, the address typed as confirmation.
    await page.getByRole('link', { name: 'Account' }).click();
    await page.waitForURL(`${web.url}/console/account`);
    await settled(page);
    await recordPage(page, SHOTS, 'journey-account');
    await page.getByLabel('To confirm, type your email address').fill(email);
    await page.getByRole('button', { name: 'Close account' }).click();
    await page.waitForURL(/\/console\/sign-in\?closed=1$/);
    await page.getByText('Your account is closed and you are signed out').waitFor();
    await recordPage(page, SHOTS, 'journey-closed');
    const closed = await complete(defaultKey).catch((err: unknown) => err);
    expect(closed).to.be.an.instanceOf(OpenAI.AuthenticationError);
    const left = await web.app.db
      .selectFrom('api_keys')
      .select('id')
      .where('account_id', '=', account.id)
      .where('revoked_at', 'is', null)
      .execute();
    expect(left).to.deep.equal([]);
    expect(
      await page.evaluate<{ signed_in: boolean }>('fetch("/console/session").then((r) => r.json())'),
    ).to.deep.include({ signed_in: false });
    await page.close();
  });
});
