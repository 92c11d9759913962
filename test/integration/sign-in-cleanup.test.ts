import { expect } from 'chai';
import { ManualClock } from '../../src/clock.js';
import { JOBS } from '../../src/scheduler/jobs.js';
import { closeOutboxFor, createTestAccount } from '../support/accounts.js';
import { fromBrowser, signIn, signInLinkFor } from '../support/console.js';
import { startTestWeb, type TestWeb } from '../support/web.js';

const HOUR = 3_600_000;

describe('the daily sign-in clean-up (scheduler job sign-ins)', () => {
  let web: TestWeb;
  const clock = new ManualClock(Date.now());
  const used: string[] = [];
  const account = async () => {
    const t = await createTestAccount(web.app);
    used.push(t.account.email);
    return t.account;
  };
  const run = () => JOBS['sign-ins'].run(web.app, clock.now().toISOString().slice(0, 10), {});
  const tokensOf = (accountId: string) =>
    web.app.db.selectFrom('sign_in_tokens').select('id').where('account_id', '=', accountId).execute();
  const sessionsOf = (accountId: string) =>
    web.app.db.selectFrom('console_sessions').select('id').where('account_id', '=', accountId).execute();

  before(async () => {
    web = await startTestWeb({ clock, env: { CONSOLE_SESSION_IDLE_MINUTES: '720' } });
  });
  after(async () => {
    await closeOutboxFor(web.app, used);
    await web.close();
  });

  it('keeps sign-in links and sessions for a day after they end, then deletes them', async () => {
    const signedOut = await account();
    const b = await signIn(web.app, web.url, signedOut.email);
    expect((await fromBrowser(b, 'POST', '/console/sign-out')).status).to.equal(204);
    const unfollowed = await account();
    await signInLinkFor(web.app, { origin: web.url }, unfollowed.email);

    clock.advance(23 * HOUR);
    await run();
    expect(await tokensOf(signedOut.id), 'a link followed 23 h ago').to.have.length(1);
    expect(await tokensOf(unfollowed.id), 'a link that expired under a day ago').to.have.length(1);
    expect(await sessionsOf(signedOut.id), 'a session signed out 23 h ago').to.have.length(1);

    clock.advance(2 * HOUR);
    const r = await run();
    expect(r.ok).to.equal(true);
    expect(await tokensOf(signedOut.id)).to.have.length(0);
    expect(await tokensOf(unfollowed.id)).to.have.length(0);
    expect(await sessionsOf(signedOut.id)).to.have.length(0);
  });

  it('deletes an idle session a day after its idle lifetime ran out, and leaves live sessions alone', async () => {
    const idle = await account();
    await signIn(web.app, web.url, idle.email);
    clock.advance(12 * HOUR + 23 * HOUR);
    const live = await account();
    await signIn(web.app, web.url, live.email);
    await run();
    expect(await sessionsOf(idle.id), 'idle for 12 h + 23 h').to.have.length(1);

    clock.advance(2 * HOUR);
    await run();
    expect(await sessionsOf(idle.id)).to.have.length(0);
    expect(await sessionsOf(live.id), 'signed in 2 h ago').to.have.length(1);
  });
});
