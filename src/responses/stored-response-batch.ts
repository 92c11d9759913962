// A worker's writes of stored responses, grouped: while one statement is in flight the writes that
// come in wait, and go together in the next, so answers that end together share one round trip,
// one plan and one commit. The commit's WAL flush was most of Postgres's time per stored response
// (docs/benchmark.md, "The Responses API against chat"). Each caller still waits for its own
// write, so a response is stored before its stream's last event is published, as it would be alone.
import type { Db } from '../infra/db.js';
import { saveStoredResponses, type StoredResponseEndWrite } from './stored-responses.repository.js';

/** Rows per statement at most (8 parameters each, far below Postgres's 65,535). */
const MAX_BATCH = 100;

interface Pending {
  write: StoredResponseEndWrite;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * A function that stores one response and settles when that write is committed or refused. A
 * statement that fails is tried again write by write, so one refused write (its account deleted
 * meanwhile, say) fails alone.
 */
export function storedResponseBatch(db: Db): (write: StoredResponseEndWrite) => Promise<void> {
  let queue: Pending[] = [];
  let running = false;

  const save = async (batch: Pending[]): Promise<void> => {
    try {
      await saveStoredResponses(
        db,
        batch.map((p) => p.write),
      );
      for (const p of batch) p.resolve();
    } catch (err) {
      if (batch.length === 1) return batch[0]!.reject(err);
      for (const p of batch) await save([p]);
    }
  };

  const drain = async (): Promise<void> => {
    try {
      while (queue.length > 0) {
        // One write per id in a statement (Postgres updates a row at most once in one); a later
        // write of the same id waits for the next, so writes of one response land in order.
        const ids = new Set<string>();
        const batch: Pending[] = [];
        const rest: Pending[] = [];
        for (const p of queue) {
          if (batch.length < MAX_BATCH && !ids.has(p.write.id)) {
            ids.add(p.write.id);
            batch.push(p);
          } else rest.push(p);
        }
        queue = rest;
        await save(batch);
      }
    } finally {
      running = false;
    }
  };

  return (write) =>
    new Promise<void>((resolve, reject) => {
      queue.push({ write, resolve, reject });
      if (running) return;
      running = true;
      // After this turn of the event loop, so the writes of answers ending in it go together.
      setImmediate(() => void drain());
    });
}
