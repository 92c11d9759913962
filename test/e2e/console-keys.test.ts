import { createHash } from 'node:crypto';
import path from 'node:path';
import { expect } from 'chai';
import type { Locator, Page } from 'playwright-core';
import {
  closeOutboxFor,
  createTestAccount,
  latestEmailTo,
  verificationLinkIn,
  type TestAccount,
} from '../support/accounts.js';
import { launchBrowser, type TestBrowser } from '../support/browser.js';
import { pageReads, recordPage, settled } from '../support/console-page.js';
import { uniqueEmail } from '../support/env.js';
import { eventually, get, post, request } from '../support/http.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

// The console's Keys page in a real browser (Debian's Chromium through playwright-core), at 375
// and 1280 px with axe-core: the list, creating a key (its secret shown once), the service's 422s
// at their fields, editing, revoking after a confirmation, regenerating the default key (then held
// for 2 hours), and the verification link still landing on the key. Screenshots go to
// CONSOLE_SHOTS_DIR (var/console-screenshots/ by default).

const SHOTS = path.resolve(process.env.CONSOLE_SHOTS_DIR ?? path.join('var', 'console-screenshots'));
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/** As the console writes a time: "26 Nov 2026, 15:04 UTC". */
const utcDateTime = (iso: string) => {
  const d = new Date(iso);
  const day = d.toLocaleDateString('en-GB', { day: 'numeric', month: 'short', year: 'numeric', timeZone: 'UTC' });
  return `${day}, ${d.toISOString().slice(11, 16)} UTC`;
};
/** YYYY-MM-DD, `days` from today (UTC). */
const dayFromToday = (days: number) => new Date(Date.now() + days * 86_400_000).toISOString().slice(0, 10);

interface KeyView {
  id: string;
  name: string;
  redacted_value: string;
  created_at: string;
  last_used_at: string | null;
  expires_at: string | null;
}

describe('the keys page in a real browser (headless Chromium)', function () {
  this.timeout(120_000);
  let web: TestWeb;
  let browser: TestBrowser;
  const emails: string[] = [];

  before(async () => {
    // A fixed port, so the links in the emails name this very server, as in production.
    const probe = await startTestWeb();
    const port = new URL(probe.url).port;
    await probe.close();
    web = await startTestWeb({ env: { PORT: port, PUBLIC_BASE_URL: `http://127.0.0.1:${port}` } });
    browser = await launchBrowser({ permissions: ['clipboard-read', 'clipboard-write'] });
  });
  after(async () => {
    await browser?.close();
    await closeOutboxFor(web.app, emails);
    await web?.close();
  });

  /** The Keys page, signed in as `who` by the sign-in form and the link the outbox holds. */
  async function keysPageOf(who: TestAccount): Promise<Page> {
    await browser.context.clearCookies();
    const page = await browser.context.newPage();
    await page.goto(`${web.url}/console/sign-in?return_to=${encodeURIComponent('/console/keys')}`);
    await page.getByLabel('Email address').fill(who.account.email);
    await page.getByRole('button', { name: 'Email me a sign-in link' }).click();
    await page.getByRole('heading', { name: 'Check your email' }).waitFor();
    const mail = (await latestEmailTo(web.app, who.account.email))!.text_body;
    const link = new URL(/https?:\/\/\S+\/console\/sign-in\/confirm\?token=[A-Za-z0-9_%-]+/.exec(mail)![0]);
    await page.goto(`${web.url}${link.pathname}${link.search}`);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL(`${web.url}/console/keys`);
    await settled(page);
    return page;
  }

  const keysOf = async (who: TestAccount): Promise<KeyView[]> =>
    (await get(`${web.url}/v1/keys`, { bearer: who.jwt })).body.data as KeyView[];

  async function createKey(who: TestAccount, body: Record<string, unknown>): Promise<KeyView & { api_key: string }> {
    const r = await post(`${web.url}/v1/keys`, body, { bearer: who.jwt });
    expect(r.status, r.text).to.equal(201);
    return r.body;
  }

  const card = (page: Page, name: string): Locator =>
    page.locator('.key-list > li').filter({ has: page.getByRole('heading', { name, exact: true }) });

  /** Waits until the element `id` has the focus. */
  const focused = (page: Page, id: string) => pageReads(page, 'document.activeElement?.id', id);

  /** A card's lines as the page shows them. */
  const facts = async (c: Locator) =>
    Object.fromEntries(
      await c
        .locator('[data-field]')
        .evaluateAll((els) => els.map((el) => [el.getAttribute('data-field'), el.textContent!.trim()])),
    ) as Record<string, string>;

  /** What the page shows as this month's spend of a free account's key: $0.00, or "—" where usage is not given by key. */
  async function expectedSpend(who: TestAccount): Promise<string> {
    const usage = await get(`${web.url}/v1/billing/usage`, { bearer: who.jwt });
    return 'by_key' in usage.body ? '$0.00' : '—';
  }

  const rowOf = (key: string) =>
    web.app.db.selectFrom('api_keys').selectAll().where('key_hash', '=', sha256(key)).executeTakeFirstOrThrow();

  it('shows a new account its default key alone, and says what to do next', async () => {
    const who = await createTestAccount(web.app);
    const page = await keysPageOf(who);
    const [key] = await keysOf(who);
    const only = page.locator('.key-list > li');
    expect(await only.count()).to.equal(1);
    expect(await only.locator('.badge').allTextContents()).to.deep.equal(['Default']);
    expect(await facts(only)).to.deep.equal({
      redacted: key!.redacted_value,
      created: utcDateTime(key!.created_at),
      'last-used': 'never',
      expires: 'never',
      models: 'All models',
      rpm: "Your tier's limit",
      'spend-limit': 'None',
      spent: await expectedSpend(who),
    });
    expect(await page.locator('#only-default').innerText()).to.match(/Create a key for each program/);
    expect(await page.getByRole('button', { name: 'Regenerate…' }).isEnabled()).to.equal(true);
    // The default key is replaced, never revoked: it offers no Revoke.
    expect(await page.getByRole('button', { name: /^Revoke/ }).count()).to.equal(0);
    await recordPage(page, SHOTS, 'keys-only-default');
    await page.close();
  });

  it("lists each key's name, value, dates, models, limits, state and this month's spend, and never a secret", async () => {
    const who = await createTestAccount(web.app);
    const nightly = await createKey(who, {
      name: 'Nightly report',
      models: ['gemini-2.5-flash'],
      limits: { requests_per_minute: 10, monthly_spend_limit_usd: '12.5' },
      expires_at: `${dayFromToday(30)}T00:00:00Z`,
    });
    const bot = await createKey(who, { name: 'Support bot' });
    expect(
      (await request('PATCH', `${web.url}/v1/keys/${bot.id}`, { json: { disabled: true }, bearer: who.jwt })).status,
    ).to.equal(200);
    // Used once: its last use is recorded (to the minute).
    expect((await get(`${web.url}/v1/models`, { bearer: nightly.api_key })).status).to.equal(200);
    // The write runs beside the request, so it is waited for.
    await eventually(async () => {
      const row = await web.app.db
        .selectFrom('api_keys')
        .select('last_used_at')
        .where('id', '=', nightly.id)
        .executeTakeFirstOrThrow();
      return row.last_used_at ?? undefined;
    }, 'the key’s last use recorded');

    const page = await keysPageOf(who);
    const listed = await keysOf(who);
    const view = (id: string) => listed.find((k) => k.id === id)!;
    const spent = await expectedSpend(who);
    expect(await page.locator('.key-list > li h3').allTextContents()).to.deep.equal([
      'Default',
      'Nightly report',
      'Support bot',
    ]);
    expect(await facts(card(page, 'Nightly report'))).to.deep.equal({
      redacted: nightly.redacted_value,
      created: utcDateTime(nightly.created_at),
      'last-used': utcDateTime(view(nightly.id).last_used_at!),
      expires: utcDateTime(nightly.expires_at!),
      models: 'gemini-2.5-flash',
      rpm: '10',
      'spend-limit': '$12.50',
      spent,
    });
    expect(await card(page, 'Support bot').locator('.badge').allTextContents()).to.deep.equal(['Disabled']);
    expect(await facts(card(page, 'Support bot'))).to.deep.include({ 'last-used': 'never', models: 'All models' });
    expect(await page.content()).not.to.include(nightly.api_key);
    expect(await page.content()).not.to.include(bot.api_key);
    await recordPage(page, SHOTS, 'keys-list');
    await page.close();
  });

  it('creates a key from the form and shows its secret once, with a copy button and a warning', async () => {
    const who = await createTestAccount(web.app);
    const page = await keysPageOf(who);
    await page.getByRole('button', { name: 'Create a key' }).click();
    // The form opens with focus in its first field.
    await focused(page, 'key-name');
    await page.keyboard.type('CI runner');
    const freeModels = web.app.catalog.forTier('free').map((m) => m.id);
    // Every model is ticked at first; one is unticked.
    for (const m of freeModels)
      expect(await page.getByRole('checkbox', { name: m, exact: true }).isChecked(), m).to.equal(true);
    await page.getByRole('checkbox', { name: freeModels[0]!, exact: true }).uncheck();
    await page.getByLabel('Requests per minute (optional)').fill('5');
    await page.getByLabel('Monthly spending limit in USD (optional)').fill('$3.5');
    await page.getByLabel('Expires on (optional)').fill(dayFromToday(30));
    await recordPage(page, SHOTS, 'keys-create-form');
    await page.getByRole('button', { name: 'Create key' }).click();

    await page.locator('#api-key').waitFor();
    await focused(page, 'new-key');
    expect(await page.locator('#new-key').innerText()).to.equal('Your new key “CI runner”');
    expect(await page.locator('.shown-once .warning').innerText()).to.equal('Save it now: it will not be shown again.');
    // The announcement and the list's new card render after the secret: each is waited for, not raced.
    await page.getByRole('status').filter({ hasText: 'Key “CI runner” created.' }).waitFor();
    const secret = (await page.locator('#api-key').textContent())!.trim();
    const row = await rowOf(secret);
    expect(row).to.deep.include({
      name: 'CI runner',
      is_default: false,
      models: freeModels.slice(1),
      requests_per_minute: 5,
      monthly_spend_limit_usd: '3.50',
      revoked_at: null,
    });
    expect(row.expires_at!.toISOString()).to.equal(`${dayFromToday(30)}T00:00:00.000Z`);
    expect((await get(`${web.url}/v1/models`, { bearer: secret })).status).to.equal(200);
    await page.getByRole('button', { name: 'Copy key' }).click();
    await page.getByRole('status').filter({ hasText: 'Copied to the clipboard.' }).waitFor();
    expect(await page.evaluate('navigator.clipboard.readText()')).to.equal(secret);
    await card(page, 'CI runner').locator('[data-field="redacted"]').waitFor();
    expect(await facts(card(page, 'CI runner'))).to.deep.include({
      redacted: `sk-svc-…${secret.slice(-4)}`,
      models: freeModels.slice(1).join(', '),
      rpm: '5',
      'spend-limit': '$3.50',
    });
    await recordPage(page, SHOTS, 'keys-created');

    // Shown once: a reload shows the key in the list, never its secret.
    await page.reload();
    await settled(page);
    expect(await page.locator('#api-key').count()).to.equal(0);
    expect(await card(page, 'CI runner').count()).to.equal(1);
    expect(await page.content()).not.to.include(secret);
    await page.close();
  });

  it("shows the service's 422 at its field, named by the field's description, and focuses it", async () => {
    const who = await createTestAccount(web.app);
    const page = await keysPageOf(who);
    await page.getByRole('button', { name: 'Create a key' }).click();
    await page.getByLabel('Name').fill('Too eager');
    await page.getByLabel('Requests per minute (optional)').fill('0');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.locator('#key-rpm-error').waitFor();
    await focused(page, 'key-rpm');
    const rpm = page.locator('#key-rpm');
    expect(await rpm.getAttribute('aria-invalid')).to.equal('true');
    expect(await rpm.getAttribute('aria-describedby')).to.include('key-rpm-error');
    expect(await page.locator('#key-rpm-error').innerText()).to.match(/greater than or equal to 1/);

    // The expiry is checked by the service after the schema: its answer lands at its own field.
    await rpm.fill('');
    await page.getByLabel('Expires on (optional)').fill('2020-01-01');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.locator('#key-expires-error').waitFor();
    await focused(page, 'key-expires');
    expect(await page.locator('#key-expires-error').innerText()).to.equal('Input should be in the future');
    expect(await rpm.getAttribute('aria-invalid')).to.equal(null);
    // What the page can tell without asking, it says at the field too.
    await page.getByLabel('Monthly spending limit in USD (optional)').fill('ten dollars');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.locator('#key-spend-error').waitFor();
    expect(await page.locator('#key-spend-error').innerText()).to.match(/amount in dollars/);
    await recordPage(page, SHOTS, 'keys-create-errors');
    expect((await keysOf(who)).map((k) => k.name)).to.deep.equal(['Default']);
    await page.close();
  });

  it("edits a key's name, limit and disabled flag, and the change holds at once", async () => {
    const who = await createTestAccount(web.app);
    const batch = await createKey(who, { name: 'Batch' });
    const page = await keysPageOf(who);
    await page.getByRole('button', { name: 'Edit “Batch”' }).click();
    await focused(page, 'key-name');
    expect(await page.getByLabel('Name').inputValue()).to.equal('Batch');
    await page.getByLabel('Name').fill('Batch v2');
    await page.getByLabel('Requests per minute (optional)').fill('20');
    await page.getByRole('checkbox', { name: 'Disabled' }).check();
    await recordPage(page, SHOTS, 'keys-edit');
    await page.getByRole('button', { name: 'Save changes' }).click();
    await page.getByRole('status').filter({ hasText: 'Key “Batch v2” saved.' }).waitFor();
    // Focus comes back to the key's Edit button.
    await focused(page, `edit-${batch.id}`);
    const edited = card(page, 'Batch v2');
    // The list is read again after the answer: its new card is waited for, not raced.
    await edited.locator('.badge').filter({ hasText: 'Disabled' }).waitFor();
    expect(await edited.locator('.badge').allTextContents()).to.deep.equal(['Disabled']);
    expect(await facts(edited)).to.deep.include({ rpm: '20', models: 'All models' });
    expect(await rowOf(batch.api_key)).to.deep.include({ name: 'Batch v2', requests_per_minute: 20, disabled: true });
    expect((await get(`${web.url}/v1/models`, { bearer: batch.api_key })).status).to.equal(401);
    await page.close();
  });

  it('revokes a key only after the confirmation, and the key is refused at once', async () => {
    const who = await createTestAccount(web.app);
    const old = await createKey(who, { name: 'Old job' });
    const page = await keysPageOf(who);
    const revoke = page.getByRole('button', { name: 'Revoke… “Old job”' });
    await revoke.click();
    const dialog = page.getByRole('dialog', { name: 'Revoke “Old job”?' });
    await dialog.waitFor();
    expect(await dialog.innerText()).to.include(old.redacted_value);
    await recordPage(page, SHOTS, 'keys-revoke-confirm');
    // Cancelled: nothing changes, and focus is back on the button.
    await dialog.getByRole('button', { name: 'Cancel' }).click();
    await dialog.waitFor({ state: 'hidden' });
    expect(await page.evaluate('document.activeElement?.textContent')).to.equal('Revoke… “Old job”');
    expect((await rowOf(old.api_key)).revoked_at).to.equal(null);

    await revoke.click();
    await dialog.getByRole('button', { name: 'Revoke key' }).click();
    await page.getByRole('status').filter({ hasText: 'Key “Old job” revoked' }).waitFor();
    await focused(page, 'keys-heading');
    await card(page, 'Old job').waitFor({ state: 'detached' });
    expect((await rowOf(old.api_key)).revoked_at).to.be.an.instanceOf(Date);
    expect((await get(`${web.url}/v1/models`, { bearer: old.api_key })).status).to.equal(401);
    await recordPage(page, SHOTS, 'keys-revoked');
    await page.close();
  });

  it('regenerates the default key after the confirmation, then holds Regenerate disabled with the time it comes back', async () => {
    const who = await createTestAccount(web.app);
    const other = await createKey(who, { name: 'Other program' });
    const page = await keysPageOf(who);
    await page.getByRole('button', { name: 'Regenerate…' }).click();
    await page
      .getByRole('dialog', { name: 'Regenerate your default key?' })
      .getByRole('button', { name: 'Regenerate' })
      .click();
    await page.locator('#api-key').waitFor();
    expect(await page.locator('#new-key').innerText()).to.equal('Your new default key');
    const fresh = (await page.locator('#api-key').textContent())!.trim();
    expect((await get(`${web.url}/v1/models`, { bearer: who.apiKey })).status).to.equal(401);
    expect((await get(`${web.url}/v1/models`, { bearer: fresh })).status).to.equal(200);
    expect((await get(`${web.url}/v1/models`, { bearer: other.api_key })).status).to.equal(200);
    const button = page.getByRole('button', { name: 'Regenerate…' });
    await page.locator('#next-allowed').waitFor();
    expect(await button.isDisabled()).to.equal(true);

    // After a reload the time comes from the service (api_key.next_regeneration_at).
    await page.reload();
    await settled(page);
    // The page reads the time after it renders: waited for, not raced.
    await page.locator('#next-allowed').waitFor();
    const info = await get(`${web.url}/v1/subscription/info`, { bearer: who.jwt });
    const next = info.body.api_key.next_regeneration_at as string;
    expect(await button.isDisabled()).to.equal(true);
    expect(await button.getAttribute('aria-describedby')).to.equal('next-allowed');
    expect(await page.locator('#next-allowed').innerText()).to.equal(
      `Regenerated in the last 2 hours: the next regeneration is allowed from ${utcDateTime(next)}.`,
    );
    await recordPage(page, SHOTS, 'keys-regenerate-held');
    await page.close();
  });

  it('lands the verification link on the keys page through /console/key?new=1, the key shown once', async () => {
    const email = uniqueEmail('keys-verify');
    emails.push(email);
    await browser.context.clearCookies();
    const page = await browser.context.newPage();
    expect((await post(`${web.url}/v1/auth/signup`, { name: 'Ada', email, organization: 'Engines' })).status).to.equal(
      200,
    );
    const { link } = verificationLinkIn((await latestEmailTo(web.app, email))!.text_body);
    await page.goto(link);
    const landed: string[] = [];
    page.on('framenavigated', (f) => {
      if (f === page.mainFrame()) landed.push(new URL(f.url()).pathname + new URL(f.url()).search);
    });
    await page.getByRole('button', { name: 'Verify and show my API key' }).click();
    await page.locator('#api-key').waitFor();
    expect(landed[0]).to.equal('/console/key?new=1');
    // The address bar drops ?new=1 and names the page's address.
    expect(page.url()).to.equal(`${web.url}/console/keys`);
    expect(await page.locator('#new-key').innerText()).to.equal('Your API key');
    const key = (await page.locator('#api-key').textContent())!.trim();
    expect(await rowOf(key)).to.deep.include({ is_default: true, revoked_at: null });
    expect(await page.locator('.key-list > li').count()).to.equal(1);
    await recordPage(page, SHOTS, 'keys-after-verification');

    // Shown once: a reload, or the landing address opened again, never shows it.
    await page.reload();
    await settled(page);
    expect(await page.locator('#api-key').count()).to.equal(0);
    await page.goto(`${web.url}/console/key?new=1`);
    await page.getByText('The key from your verification was already shown.').waitFor();
    expect(page.url()).to.equal(`${web.url}/console/keys`);
    expect(await page.content()).not.to.include(key);
    // The old address of the page leads to it.
    await page.goto(`${web.url}/console/key`);
    await page.waitForURL(`${web.url}/console/keys`);
    expect(await page.getByRole('link', { name: 'Keys' }).getAttribute('aria-current')).to.equal('page');
    await page.close();
  });
});
