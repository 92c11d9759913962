import { loadConfigOrExit, type Config } from '../src/config.js';
import { createDb, type Db } from '../src/infra/db.js';
import { databaseAnswers } from '../src/health/health.service.js';
import { findAccountForEmail } from '../src/accounts/accounts.service.js';
import { mintJwt } from '../src/accounts/jwt.js';
import { systemClock } from '../src/clock.js';

// `npm run --silent mint-jwt -- EMAIL` prints a JWT for that account and nothing else on stdout,
// signed with the configuration the running service verifies with (JWT_SECRET, JWT_ALGORITHMS,
// JWT_ISSUER, JWT_AUDIENCE from the environment), so an operator or a script can call the JWT
// endpoints. (`--silent` keeps npm's own banner off stdout.) Messages go to stderr with a
// non-zero exit: 64 usage, 65 unknown account, 69 database unreachable, 78 configuration.

function fail(code: number, message: string): never {
  process.stderr.write(`mint-jwt: ${message}\n`);
  process.exit(code);
}

// Where `npm start` puts its own Postgres when the machine has none on 5432 (scripts/lib/setup.mjs).
const NPM_START_PRIVATE_DB = 'postgres://postgres@127.0.0.1:54329/completions_dev';

/** The service's database: DATABASE_URL when set; otherwise the ones `npm start` would use, in its order. */
async function openDb(config: Config): Promise<Db> {
  const candidates = process.env.DATABASE_URL ? [config.db.url] : [config.db.url, NPM_START_PRIVATE_DB];
  for (const url of candidates) {
    const db = createDb({ ...config, db: { ...config.db, url } });
    try {
      await databaseAnswers(db);
      return db;
    } catch {
      await db.destroy();
    }
  }
  return fail(69, `cannot reach the database (${candidates.join(', ')}); set DATABASE_URL to the service's database`);
}

const args = process.argv.slice(2);
if (args.length !== 1 || args[0]!.startsWith('-')) fail(64, 'usage: npm run --silent mint-jwt -- EMAIL');
const email = args[0]!;

const config = loadConfigOrExit();
if (config.auth.jwt.secret === undefined) {
  fail(
    78,
    'this service verifies JWTs against JWT_JWKS_URL: tokens come from that identity provider and cannot be minted here (mint-jwt needs JWT_SECRET)',
  );
}

const db = await openDb(config);
try {
  const account = await findAccountForEmail(db, email);
  if (!account) fail(65, `no account with the email address ${email}`);
  if (account.verified_at === null) {
    process.stderr.write(
      `mint-jwt: note: ${email} has not verified its email address; the service answers 403 until it does\n`,
    );
  }
  const token = await mintJwt(config, systemClock, { sub: account.id, email: account.email });
  process.stdout.write(`${token}\n`);
} finally {
  await db.destroy();
}
