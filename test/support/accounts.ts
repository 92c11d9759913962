import type { AppContext } from '../../src/context.js';
import { generateApiKey } from '../../src/accounts/api-keys.js';
import type { Account } from '../../src/accounts/accounts.repository.js';
import { mintJwt } from '../../src/accounts/jwt.js';
import type { Tier } from '../../db/schema/index.js';
import { uniqueEmail } from './env.js';

export interface TestAccount {
  account: Account;
  apiKey: string;
  jwt: string;
}

/**
 * An account straight in the database (verified, with an active API key and a JWT), for tests
 * whose subject is not sign-up itself. Sign-up and verification have their own tests.
 */
export async function createTestAccount(app: AppContext, opts: { tier?: Tier; verified?: boolean; email?: string; stripeCustomerId?: string } = {}): Promise<TestAccount> {
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
  await app.db.insertInto('api_keys').values({ account_id: account.id, key_hash: key.hash, display_prefix: key.displayPrefix }).execute();
  const jwt = await mintJwt(app.config, app.clock, { sub: account.id, email });
  return { account, apiKey: key.key, jwt };
}
