import type { AppContext } from '../../src/context.js';
import { generateApiKey } from '../../src/accounts/api-keys.js';
import type { Account } from '../../src/accounts/account.js';
import { mintJwt } from '../../src/accounts/jwt.js';
import type { Tier } from '../../db/schema/index.js';
import { accountOf, defineRoutes, type AuthMode, type HttpContext, type RouteSpec } from '../../src/http/route.js';
import { uniqueEmail } from './env.js';

export interface TestAccount {
  account: Account;
  apiKey: string;
  /** A JWT the service accepts ('' when it verifies against a JWKS URL and cannot mint). */
  jwt: string;
}

/**
 * An account straight in the database (verified, with its default API key and a JWT), for tests
 * whose subject is not sign-up itself. Sign-up and verification have their own tests.
 */
export async function createTestAccount(
  app: AppContext,
  opts: { tier?: Tier; verified?: boolean; email?: string; stripeCustomerId?: string } = {},
): Promise<TestAccount> {
  const email = opts.email ?? uniqueEmail();
  const account = await app.db
    .insertInto('accounts')
    .values({
      name: 'Test User',
      email,
      organization: 'Test Org',
      tier: opts.tier ?? 'free',
      verified_at: opts.verified === false ? null : app.clock.now(),
      stripe_customer_id: opts.stripeCustomerId ?? null,
    })
    .returningAll()
    .executeTakeFirstOrThrow();
  const key = generateApiKey();
  await app.db
    .insertInto('api_keys')
    .values({ account_id: account.id, key_hash: key.hash, display_prefix: key.displayPrefix, last4: key.last4 })
    .execute();
  // With JWT_JWKS_URL tokens come from the identity provider; tests sign their own there. An hour,
  // as tests move their clocks past the minted default (15 minutes).
  const jwt =
    app.config.auth.jwt.secret === undefined
      ? ''
      : await mintJwt(app.config, app.clock, { sub: account.id, email }, 3600);
  return { account, apiKey: key.key, jwt };
}

/**
 * One route per credential mode, answering with the account it authenticated, for tests of the
 * credential middleware that must not depend on any one feature's endpoints.
 */
export function credentialProbeRoutes(): RouteSpec[] {
  const modes: AuthMode[] = ['api_key', 'jwt', 'api_key_or_jwt'];
  return defineRoutes(
    modes.map((mode) => ({
      method: 'get' as const,
      path: `/probe/${mode}`,
      operationId: `probe_${mode}`,
      summary: `authenticates with ${mode}`,
      tag: 'test',
      auth: mode,
      responses: { 200: { description: 'the account' } },
      handler: (ctx: HttpContext) => {
        ctx.body = { account_id: accountOf(ctx).id, credential: ctx.state.credential };
      },
    })),
  );
}

/** The newest queued email to that address (any case), as the outbox holds it. */
export async function latestEmailTo(
  app: AppContext,
  address: string,
): Promise<
  { id: string; kind: string; subject: string; text_body: string; html_body: string; status: string } | undefined
> {
  return app.db
    .selectFrom('email_outbox')
    .select(['id', 'kind', 'subject', 'text_body', 'html_body', 'status'])
    .where((eb) => eb(eb.fn('lower', ['to_address']), '=', address.toLowerCase()))
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
}

/** The verification link in a message body (the token is its `token` query parameter). */
export function verificationLinkIn(text: string): { link: string; token: string } {
  const link = /https?:\/\/\S+\/v1\/auth\/verify\?token=[A-Za-z0-9_%-]+/.exec(text)?.[0];
  if (!link) throw new Error(`no verification link in:\n${text}`);
  return { link, token: new URL(link).searchParams.get('token')! };
}

/** Outbox rows of these addresses still pending are closed, so no later test's worker sends them. */
export async function closeOutboxFor(app: AppContext, addresses: string[]): Promise<void> {
  if (addresses.length === 0) return;
  await app.db
    .updateTable('email_outbox')
    .set({ status: 'failed', last_error: 'closed by test cleanup' })
    .where('status', '=', 'pending')
    .where((eb) =>
      eb(
        eb.fn('lower', ['to_address']),
        'in',
        addresses.map((a) => a.toLowerCase()),
      ),
    )
    .execute();
}
