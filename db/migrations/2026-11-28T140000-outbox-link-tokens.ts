import { sql, type Kysely } from 'kysely';

// A message carrying a one-time link (verification, sign-in) names its token in link_token while
// it waits to be sent; once sent or given up, the token is cut out of its bodies and link_token is
// cleared, so the outbox keeps no usable link. Rows written before this column get the same:
// those already sent or failed are scrubbed here, pending ones get their token named for the sender.

/** Tokens are 32 random bytes in base64url (43 characters), in a `token=` query parameter. */
const TOKEN = 'token=([A-Za-z0-9_-]{43})';
const REMOVED = 'token=[removed once sent]';

export async function up(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('email_outbox').addColumn('link_token', 'text').execute();
  await sql`
    update email_outbox
       set text_body = regexp_replace(text_body, ${TOKEN}, ${REMOVED}, 'g'),
           html_body = regexp_replace(html_body, ${TOKEN}, ${REMOVED}, 'g')
     where status <> 'pending' and (text_body ~ ${TOKEN} or html_body ~ ${TOKEN})`.execute(db);
  await sql`
    update email_outbox set link_token = substring(text_body from ${TOKEN})
     where status = 'pending' and text_body ~ ${TOKEN}`.execute(db);
}

export async function down(db: Kysely<unknown>): Promise<void> {
  await db.schema.alterTable('email_outbox').dropColumn('link_token').execute();
}
