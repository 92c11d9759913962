import {
  Kysely,
  PostgresAdapter,
  PostgresDialect,
  sql,
  type ControlledTransaction,
  type PostgresDialectConfig,
  type RawBuilder,
  type Transaction,
} from 'kysely';
import pg from 'pg';
import type { Config } from '../config.js';
import type { Database } from '../../db/schema/index.js';

export type Db = Kysely<Database>;
export type Trx = Transaction<Database>;

// int8 and numeric stay strings (pg's default): sums of tokens and money are never JS floats.

// Behind a transaction-mode pooler (PgBouncer's pool_mode = transaction) a client connection is a
// server session only for the length of one transaction; between transactions each statement may
// run in another session. So nothing here leaves state in a session: locks are transaction-scoped,
// held by a transaction kept open as long as the lock is needed; no SET outside a transaction
// (SET LOCAL only); queries are unnamed statements (pg's default), parsed and run within one
// round trip; no LISTEN, no temporary tables. statement_timeout is a startup parameter unless
// DB_STATEMENT_TIMEOUT_MS is 0: PgBouncer refuses startup parameters it does not know, so behind it
// the variable is 0 and the database role carries the timeout (docs/deployment.md).

function openPool(config: Config, max: number, extra: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: config.db.url,
    max,
    connectionTimeoutMillis: 3000,
    idleTimeoutMillis: 30_000,
    ...(config.db.statementTimeoutMs > 0 ? { statement_timeout: config.db.statementTimeoutMs } : {}),
    ...extra,
  });
  // A dropped connection must not crash the process. The pool only listens for errors on idle
  // clients; a client checked out when its socket dies would emit an unhandled 'error', so every
  // client gets a listener of its own. Its query fails, and the pool discards it on release.
  pool.on('error', () => {});
  pool.on('connect', (client) => client.on('error', () => {}));
  return pool;
}

/** Each handle's lock-holding transactions, on a pool of their own (see createDb). */
const lockPools = new WeakMap<Db, Db>();

/**
 * The one database handle of a process: at most DB_POOL_SIZE connections for queries and short
 * transactions, and DB_LOCK_POOL_SIZE more for transactions that hold a lock while their holder
 * works on the first pool. Kept apart, a burst of lock holders can never take every connection
 * their own work waits for. destroy() closes both.
 */
export function createDb(config: Config): Db {
  const queries = openPool(config, config.db.poolSize);
  // allowExitOnIdle: an idle lock connection never keeps a finished script running.
  const locks = openPool(config, config.db.lockPoolSize, { allowExitOnIdle: true });
  const lockDb = new Kysely<Database>({ dialect: new PostgresDialect({ pool: locks }) });
  const both = {
    connect: () => queries.connect(),
    end: async () => void (await Promise.all([queries.end(), locks.end()])),
  };
  const db = new Kysely<Database>({ dialect: new ServiceDialect({ pool: both }, lockDb) });
  lockPools.set(db, lockDb);
  return db;
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
  if (!pending)
    throw new Error(
      'onCommit needs a transaction started with transaction() from infra/db; its after-commit work would be lost',
    );
  pending.push(work);
}

// ---------------------------------------------------------------------------------------------
// Advisory locks

/** An advisory lock's key: a namespace of ours and a name (hashed), or one 64-bit id. */
export type LockKey = { namespace: number; name: string } | { id: bigint };

export const LOCK_BUSY = Symbol('lock busy');

export interface HeldLock {
  /** Whether the lock is still held: false, or a rejection, once its connection is gone. */
  isHeld(): Promise<boolean>;
}

const lockArgs = (key: LockKey): RawBuilder<unknown> =>
  'id' in key ? sql`${key.id.toString()}::bigint` : sql`${key.namespace}::int, hashtext(${key.name})`;

/**
 * Takes `key` in a transaction of its own on the lock pool, waiting up to `waitMs` (0: not at all)
 * for another holder; the transaction, still open, holds it. Undefined when it was not granted.
 *
 * Transaction-scoped rather than session-level: behind a transaction-mode pooler a session lock
 * is taken in one server session and stays there, held for whoever runs there next and released
 * by no one, while a transaction keeps its server session until it ends. Ending it (rollback, or
 * the connection closing because the process died, which a pooler passes on by closing the server
 * session) releases the lock at once: there is no lease to wait out.
 */
async function takeLock(locks: Db, key: LockKey, waitMs: number): Promise<ControlledTransaction<Database> | undefined> {
  const trx = await locks.startTransaction().execute();
  try {
    // Idle by design while its holder works, so no idle-in-transaction timeout may end it; a wait
    // is bounded by lock_timeout, which statement_timeout must not cut short.
    await sql`select set_config('idle_in_transaction_session_timeout', '0', true), set_config('statement_timeout', '0', true), set_config('lock_timeout', ${`${Math.max(1, waitMs)}ms`}, true)`.execute(
      trx,
    );
    let granted: boolean;
    if (waitMs > 0) {
      granted = await sql`select pg_advisory_xact_lock(${lockArgs(key)})`.execute(trx).then(
        () => true,
        (err: unknown) => {
          if ((err as { code?: unknown }).code === '55P03') return false; // lock_not_available: lock_timeout passed
          throw err;
        },
      );
    } else {
      granted =
        (await sql<{ ok: boolean }>`select pg_try_advisory_xact_lock(${lockArgs(key)}) as ok`.execute(trx)).rows[0]
          ?.ok === true;
    }
    if (granted) return trx;
  } catch (err) {
    await endLock(trx);
    throw err;
  }
  await endLock(trx);
  return undefined;
}

/** Releases a lock taken by takeLock; a transaction whose connection is gone has released it already. */
const endLock = (trx: ControlledTransaction<Database>): Promise<unknown> =>
  trx
    .rollback()
    .execute()
    .catch(() => undefined);

async function lockStillHeld(
  trx: ControlledTransaction<Database>,
  key: { namespace: number; name: string },
): Promise<boolean> {
  const r = await sql<{ held: boolean }>`
    select exists (
      select 1 from pg_locks
       where locktype = 'advisory' and granted and pid = pg_backend_pid()
         and classid = ${key.namespace}::int::oid
         and objid = (hashtext(${key.name})::bigint & 4294967295)::oid
         and objsubid = 2
    ) as held`.execute(trx);
  return r.rows[0]?.held === true;
}

/**
 * Runs `fn` while this process holds the advisory lock `key` (see takeLock), waiting up to
 * `waitMs` for another holder to finish. LOCK_BUSY when it never got the lock. `fn` works on `db`
 * as usual: the lock's transaction holds only the lock.
 */
export async function withAdvisoryLock<T>(
  db: Db,
  key: { namespace: number; name: string },
  waitMs: number,
  fn: (lock: HeldLock) => Promise<T>,
): Promise<T | typeof LOCK_BUSY> {
  const locks = lockPools.get(db);
  if (!locks)
    throw new Error('withAdvisoryLock needs the handle createDb returned, not a transaction or a connection of it');
  const trx = await takeLock(locks, key, waitMs);
  if (!trx) return LOCK_BUSY;
  try {
    return await fn({ isHeld: () => lockStillHeld(trx, key) });
  } finally {
    await endLock(trx);
  }
}

// Kysely's own migration lock is a session-level advisory lock taken and released on one pinned
// connection, around the migrations' transaction: behind a transaction-mode pooler it would stay
// held in whichever server session ran it. The service's dialect takes the same key (so it still
// excludes any other Kysely migrator) the way every lock here is taken.
const KYSELY_MIGRATION_LOCK: LockKey = { id: 3853314791062309107n };
/** Kysely's own wait for the migration lock. */
const MIGRATION_LOCK_WAIT_MS = 3_600_000;

class PoolerSafeAdapter extends PostgresAdapter {
  private readonly held = new WeakMap<object, ControlledTransaction<Database>>();

  constructor(private readonly locks: Db) {
    super();
  }

  override async acquireMigrationLock(db: Kysely<unknown>): Promise<void> {
    const trx = await takeLock(this.locks, KYSELY_MIGRATION_LOCK, MIGRATION_LOCK_WAIT_MS);
    if (!trx)
      throw new Error(`another migration held the migration lock for ${MIGRATION_LOCK_WAIT_MS / 60_000} minutes`);
    this.held.set(db, trx);
  }

  override async releaseMigrationLock(db: Kysely<unknown>): Promise<void> {
    const trx = this.held.get(db);
    this.held.delete(db);
    if (trx) await endLock(trx);
  }
}

class ServiceDialect extends PostgresDialect {
  constructor(
    config: PostgresDialectConfig,
    private readonly locks: Db,
  ) {
    super(config);
  }

  override createAdapter(): PostgresAdapter {
    return new PoolerSafeAdapter(this.locks);
  }
}
