import { Kysely, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import type { Config } from '../config.js';
import type { Database } from '../../db/schema/index.js';

export type Db = Kysely<Database>;
export type Trx = Transaction<Database>;

// int8 and numeric stay strings (pg's default): sums of tokens and money are never JS floats.

/** The one database handle of a process. */
export function createDb(config: Config): Db {
  const pool = new pg.Pool({
    connectionString: config.db.url,
    max: config.db.poolSize,
    connectionTimeoutMillis: 3000,
    statement_timeout: config.db.statementTimeoutMs,
    idleTimeoutMillis: 30_000,
  });
  // A dropped connection must not crash the process. The pool only listens for errors on idle
  // clients; a client checked out when its socket dies would emit an unhandled 'error', so every
  // client gets a listener of its own. Its query fails, and the pool discards it on release.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}
