import { randomBytes } from 'node:crypto';
import { expect } from 'chai';
import { type Kysely, sql } from 'kysely';
import { migrations } from '../../db/migrations/index.js';
import { migrationDatabase } from '../support/migration-database.js';

// The outbox migration on rows written before it, in a database of its own: messages already sent
// or given up lose their link's token, a pending one keeps its body for the sender and names its
// token so the sender cuts it out once sent, and a message without a link is left as it was.

const SCRUB = '2026-11-28T140000-outbox-link-tokens';

describe('migration: email_outbox bodies scrubbed of link tokens', function () {
  this.timeout(60_000);
  const scratch = migrationDatabase('outbox_migration');
  const migrateTo = scratch.migrateTo;
  let db: Kysely<unknown>;
  before(() => {
    db = scratch.db();
  });

  const token = () => randomBytes(32).toString('base64url');
  const message = (kind: string, status: string, link: string) =>
    sql`
      insert into email_outbox (to_address, subject, text_body, html_body, kind, status)
      values ('old@example.com', ${kind}, ${`Hello,\n\n${link}\n\nThe link works once.`},
              ${`<p><a href="${link}">Open</a></p><p>${link}</p>`}, ${kind}, ${status})
      returning id`
      .execute(db)
      .then((r) => (r.rows[0] as { id: string }).id);
  type Row = { id: string; text_body: string; html_body: string; link_token: string | null };
  const row = (id: string) =>
    sql<Row>`select id, text_body, html_body, link_token from email_outbox where id = ${id}`
      .execute(db)
      .then((r) => r.rows[0]!);

  it('removes the tokens of sent and failed messages, and names the token of a pending one for its sender', async () => {
    const { error } = await migrateTo(Object.keys(migrations).filter((n) => n < SCRUB));
    expect(error).to.equal(undefined);
    const [sentToken, failedToken, pendingToken] = [token(), token(), token()];
    const sent = await message('verification', 'sent', `https://api.example.com/v1/auth/verify?token=${sentToken}`);
    const failed = await message(
      'sign_in_link',
      'failed',
      `https://api.example.com/console/sign-in/confirm?token=${failedToken}`,
    );
    const pending = await message(
      'verification',
      'pending',
      `https://api.example.com/v1/auth/verify?token=${pendingToken}`,
    );
    const plain = await message('account_exists', 'sent', 'https://api.example.com/console/sign-in');
    const bodies = (id: string) =>
      sql`select text_body, html_body from email_outbox where id = ${id}`.execute(db).then((r) => r.rows[0]);
    const plainBefore = await bodies(plain);

    const latest = await migrateTo(Object.keys(migrations));
    expect(latest.error).to.equal(undefined);
    expect(latest.results?.map((r) => r.migrationName)).to.include(SCRUB);

    for (const [id, secret] of [
      [sent, sentToken],
      [failed, failedToken],
    ] as const) {
      const scrubbed = await row(id);
      expect(JSON.stringify(scrubbed)).not.to.include(secret);
      expect(scrubbed.text_body).to.include('?token=[removed once sent]');
      expect(scrubbed.html_body).to.include('?token=[removed once sent]');
      expect(scrubbed.link_token).to.equal(null);
    }
    const waiting = await row(pending);
    expect(waiting.text_body).to.include(`token=${pendingToken}`);
    expect(waiting.link_token).to.equal(pendingToken);
    expect(await bodies(plain)).to.deep.equal(plainBefore);
    expect((await row(plain)).link_token).to.equal(null);
  });
});
