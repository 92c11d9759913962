import { randomUUID } from 'node:crypto';
import { expect } from 'chai';
import { sql } from 'kysely';
import { BUSY, withInvoicingLock } from '../../src/billing/invoicing-lock.repository.js';
import { createDb, type Db } from '../../src/infra/db.js';
import { withRunClaim } from '../../src/scheduler/scheduler-runs.repository.js';
import { migrateToLatest } from '../../db/migrate.js';
import type { Env } from '../../src/config.js';
import { randomId, testConfig } from '../support/env.js';
import { eventually } from '../support/http.js';
import { holdLockInAnotherProcess } from '../support/lock-holder.js';

// The two locks of billing, against real Postgres: an account's invoicing lock and the claim on a
// scheduled run's period. Each is a transaction-scoped advisory lock held by a transaction of its
// own, on a pool of its own (src/infra/db.ts); test/e2e/pgbouncer.test.ts runs the same behind a
// transaction-mode pooler.

/** A promise and the function that settles it: a holder that keeps its lock until the test says so. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open = () => {};
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** Advisory locks of a namespace that sessions wait for, not yet granted. */
async function waitingFor(db: Db, namespace: number): Promise<number> {
  const r = await sql<{
    n: string;
  }>`select count(*) as n from pg_locks where locktype = 'advisory' and not granted and classid = ${namespace}::int::oid`.execute(
    db,
  );
  return Number(r.rows[0]!.n);
}

/** A period no other test runs. */
const period = () => `test-${randomId()}`;

describe('advisory locks: an account invoiced by one process at a time, a scheduled period run by one', function () {
  this.timeout(30_000);
  const handles: Db[] = [];
  /** A database handle as one process has it. */
  const processDb = (env: Env = {}) => {
    const db = createDb(testConfig(env));
    handles.push(db);
    return db;
  };
  let a: Db;
  let b: Db;

  before(() => {
    [a, b] = [processDb(), processDb()];
  });
  after(async () => {
    for (const db of handles) await db.destroy();
  });

  describe("an account's invoicing lock", () => {
    it('refuses a second holder while the first holds it', async () => {
      const account = randomUUID();
      const held = gate();
      const entered = gate();
      const first = withInvoicingLock(a, account, 0, async () => {
        entered.open();
        await held.opened;
        return 'first';
      });
      await entered.opened;
      try {
        expect(await withInvoicingLock(b, account, 0, () => Promise.resolve('second'))).to.equal(BUSY);
      } finally {
        held.open();
      }
      expect(await first).to.equal('first');
    });

    it('lets two accounts be invoiced at once', async () => {
      const held = gate();
      const entered = gate();
      const first = withInvoicingLock(a, randomUUID(), 0, async () => {
        entered.open();
        await held.opened;
      });
      await entered.opened;
      try {
        expect(await withInvoicingLock(b, randomUUID(), 0, () => Promise.resolve('other account'))).to.equal(
          'other account',
        );
      } finally {
        held.open();
      }
      await first;
    });

    it('hands the lock to a waiting taker as soon as the holder finishes, not before', async () => {
      const account = randomUUID();
      const held = gate();
      const entered = gate();
      const events: string[] = [];
      const first = withInvoicingLock(a, account, 0, async () => {
        entered.open();
        await held.opened;
        events.push('first done');
      });
      await entered.opened;
      const second = withInvoicingLock(b, account, 20_000, () => Promise.resolve(events.push('second ran')));
      await eventually(
        async () => ((await waitingFor(a, 7001)) > 0 ? true : undefined),
        'the second taker to wait for the lock',
      );
      held.open();
      await first;
      expect(await second).to.not.equal(BUSY);
      expect(events).to.deep.equal(['first done', 'second ran']);
    });

    it('answers BUSY to a taker whose wait runs out while the lock is still held', async () => {
      const account = randomUUID();
      const held = gate();
      const entered = gate();
      const first = withInvoicingLock(a, account, 0, async () => {
        entered.open();
        await held.opened;
      });
      await entered.opened;
      try {
        expect(await withInvoicingLock(b, account, 200, () => Promise.resolve('second'))).to.equal(BUSY);
      } finally {
        held.open();
      }
      await first;
    });

    it('releases the lock when the holder throws', async () => {
      const account = randomUUID();
      const failed = await withInvoicingLock(a, account, 0, () => Promise.reject(new Error('Stripe said no'))).catch(
        (err: Error) => err.message,
      );
      expect(failed).to.equal('Stripe said no');
      expect(await withInvoicingLock(b, account, 0, () => Promise.resolve('next'))).to.equal('next');
    });

    it('frees the lock of a process killed while holding it, and a waiting taker gets it at once', async () => {
      const account = randomUUID();
      const holder = await holdLockInAnotherProcess({ lock: 'invoicing', accountId: account });
      try {
        expect(await withInvoicingLock(a, account, 0, () => Promise.resolve('too early'))).to.equal(BUSY);
        const next = withInvoicingLock(a, account, 20_000, () => Promise.resolve('after the crash'));
        await eventually(
          async () => ((await waitingFor(a, 7001)) > 0 ? true : undefined),
          'the taker to wait for the lock',
        );
        await holder.kill();
        expect(await next).to.equal('after the crash');
      } finally {
        await holder.kill();
      }
    });
  });

  describe("a scheduled run's claim on its period", () => {
    it('refuses a second run of the period while the first holds its claim', async () => {
      const p = period();
      const held = gate();
      const entered = gate();
      const first = withRunClaim(a, 'invoices', p, async () => {
        entered.open();
        await held.opened;
        return 'ran';
      });
      await entered.opened;
      try {
        expect(await withRunClaim(b, 'invoices', p, () => Promise.resolve('ran too'))).to.equal(BUSY);
        expect(await withRunClaim(b, 'rollup', p, () => Promise.resolve('another job'))).to.equal('another job');
      } finally {
        held.open();
      }
      expect(await first).to.equal('ran');
      expect(await withRunClaim(b, 'invoices', p, () => Promise.resolve('ran again'))).to.equal('ran again');
    });

    it('tells a run it still holds its claim, and that it lost it once the claim connection is cut', async () => {
      const p = period();
      const lost = await withRunClaim(a, 'invoices', p, async (claim) => {
        expect(await claim.isHeld()).to.equal(true);
        // What a network cut or a restarted server does to the claim's session.
        await sql`
          select pg_terminate_backend(pid) from pg_locks
           where locktype = 'advisory' and classid = 7002::oid and objid = (hashtext(${`invoices:${p}`})::bigint & 4294967295)::oid`.execute(
          b,
        );
        return claim.isHeld().catch(() => false);
      });
      expect(lost).to.equal(false);
      expect(await withRunClaim(b, 'invoices', p, () => Promise.resolve('claimed anew'))).to.equal('claimed anew');
    });

    it('frees the claim of a process killed mid-run', async () => {
      const p = period();
      const holder = await holdLockInAnotherProcess({ lock: 'run', job: 'invoices', period: p });
      try {
        expect(await withRunClaim(a, 'invoices', p, () => Promise.resolve('too early'))).to.equal(BUSY);
        await holder.kill();
        // Postgres ends the dead client's session as soon as it reads the closed socket.
        const next = await eventually(async () => {
          const r = await withRunClaim(a, 'invoices', p, () => Promise.resolve('after the crash'));
          return r === BUSY ? undefined : r;
        }, 'the claim to be free');
        expect(next).to.equal('after the crash');
      } finally {
        await holder.kill();
      }
    });
  });

  describe("Kysely's migration lock", () => {
    // Kysely's key, so the service's migrators and any other Kysely migrator exclude each other.
    const MIGRATION_LOCK = 3853314791062309107n;
    const migrationLocks = async (granted: boolean) =>
      Number(
        (
          await sql<{ n: string }>`
          select count(*) as n from pg_locks
           where locktype = 'advisory' and granted = ${granted} and objsubid = 1
             and classid = ${(MIGRATION_LOCK >> 32n).toString()}::bigint::oid and objid = ${(MIGRATION_LOCK & 0xffffffffn).toString()}::bigint::oid`.execute(
            a,
          )
        ).rows[0]!.n,
      );

    it('makes a migrator wait while another holds the lock, and leaves it free when done', async () => {
      const other = await a.startTransaction().execute();
      try {
        await sql`select pg_advisory_xact_lock(${MIGRATION_LOCK.toString()}::bigint)`.execute(other);
        const migrating = migrateToLatest(b);
        await eventually(
          async () => ((await migrationLocks(false)) > 0 ? true : undefined),
          'the migrator to wait for the lock',
        );
        await other.rollback().execute();
        expect(await migrating).to.deep.equal([]);
      } finally {
        await other
          .rollback()
          .execute()
          .catch(() => undefined);
      }
      expect(await migrationLocks(true)).to.equal(0);
    });
  });

  describe('the pools the locks and their work come from', () => {
    it('gives a run, the account lock it takes and their work connections enough with a query pool of one', async () => {
      const small = processDb({ DB_POOL_SIZE: '1', DB_LOCK_POOL_SIZE: '2' });
      const result = await withRunClaim(small, 'invoices', period(), () =>
        withInvoicingLock(
          small,
          randomUUID(),
          0,
          async (conn) => (await sql<{ one: number }>`select 1 as one`.execute(conn)).rows[0]!.one,
        ),
      );
      expect(result).to.equal(1);
    });

    it('opens at most DB_POOL_SIZE connections for queries and DB_LOCK_POOL_SIZE for locks, whatever the demand', async () => {
      const app = `pool-bound-${randomId()}`;
      const url = new URL(process.env.DATABASE_URL!);
      url.searchParams.set('application_name', app);
      const bounded = processDb({ DATABASE_URL: url.toString(), DB_POOL_SIZE: '2', DB_LOCK_POOL_SIZE: '2' });
      const key = 900_000 + Math.floor(Math.random() * 1000);
      const sessions = async () =>
        Number(
          (
            await sql<{
              n: string;
            }>`select count(*) as n from pg_stat_activity where application_name = ${app}`.execute(a)
          ).rows[0]!.n,
        );
      // Queries that wait on a lock this test holds, so they keep their connections until it lets go.
      const blocker = await a.startTransaction().execute();
      await sql`select pg_advisory_xact_lock(${key})`.execute(blocker);
      const held = gate();
      try {
        const queries = Array.from({ length: 6 }, () =>
          sql`select pg_advisory_xact_lock_shared(${key})`.execute(bounded),
        );
        const locks = [0, 1].map(() => withInvoicingLock(bounded, randomUUID(), 0, () => held.opened));
        await eventually(
          async () => ((await sessions()) >= 4 ? true : undefined),
          'two query and two lock connections',
        );
        expect(await sessions()).to.equal(4);
        held.open();
        await blocker.rollback().execute();
        await Promise.all([...queries, ...locks]);
      } finally {
        held.open();
        await blocker
          .rollback()
          .execute()
          .catch(() => undefined);
      }
    });
  });
});
