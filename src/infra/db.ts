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

const afterCommit = new WeakMap<Trx, (() => Promise<void>)[]>();

/**
 * Runs `fn` in a transaction and, once it has committed, the work it left with onCommit (in
 * order). Work that must see committed data (telling other processes to re-read it) goes there.
 */
export async function transaction<T>(db: Db, fn: (trx: Trx) => Promise<T>): Promise<T> {
  const pending: (() => Promise<void>)[] = [];
  const result = await db.transaction().execute((trx) => {
    afterCommit.set(trx, pending);
    return fn(trx);
  });
  for (const work of pending) await work();
  return result;
}

/** Leaves `work` to run after the transaction commits; the transaction must come from transaction(). */
export function onCommit(trx: Trx, work: () => Promise<void>): void {
  const pending = afterCommit.get(trx);
  if (!pending) throw new Error('onCommit needs a transaction started with transaction() from infra/db; its after-commit work would be lost');
  pending.push(work);
}
