import { sleep } from '../../clock.js';
import type { RedisClient } from '../../infra/redis.js';
import type { LogRows } from './log.js';

/** Stream entry ids compare as two numbers, `<ms>-<seq>`. */
export function entryIdAfter(a: string, b: string): boolean {
  const [am, as] = a.split('-').map(Number) as [number, number];
  const [bm, bs] = b.split('-').map(Number) as [number, number];
  return am > bm || (am === bm && as > bs);
}

/** Entries read per blocking read. */
const PAGE = 500;

/** One log followed live: one blocking reader, shared by every resumed stream of the request here. */
class Tail {
  readonly listeners = new Set<(rows: LogRows) => void>();
  private closed = false;

  constructor(
    private readonly key: string,
    private readonly redis: RedisClient,
    private readThrough: string,
    private readonly blockMs: number,
  ) {
    void this.loop();
  }

  close(): void {
    this.closed = true;
    // Ends a blocking read in flight at once.
    this.redis.disconnect();
  }

  private async loop(): Promise<void> {
    while (!this.closed) {
      let reply: [string, LogRows][] | null;
      try {
        reply = await this.redis.xread('COUNT', PAGE, 'BLOCK', this.blockMs, 'STREAMS', this.key, this.readThrough);
      } catch {
        if (this.closed) return;
        // Redis is away: its connection waits for it; readers that hear nothing for too long give up.
        await sleep(250);
        continue;
      }
      const rows = reply?.[0]?.[1] ?? [];
      if (rows.length === 0) continue;
      this.readThrough = rows.at(-1)![0];
      for (const listener of [...this.listeners]) listener(rows);
    }
  }
}

/**
 * A web process's live tails of relay logs. A resumed stream that has replayed a running request's
 * log follows what its worker appends next through here: one blocking read (XREAD BLOCK) per log,
 * on a connection of its own, however many readers of that request this process serves, so a
 * client opening many readers cannot open as many Redis connections. A tail starts where its first
 * reader is and ends with its last; a reader that joins a tail already ahead of it reads the
 * entries in between itself (relay/follower.ts).
 */
export class RelayLogTails {
  private readonly tails = new Map<string, Tail>();

  constructor(
    private readonly deps: {
      /** A new connection for one tail's blocking reads; the tail disconnects it when it ends. */
      openBlocking: () => RedisClient;
      /** How long one blocking read waits before it is sent again. */
      blockMs: number;
    },
  ) {}

  /**
   * Calls `onRows` with the entries the log gains from here on (a tail already running may also
   * hand over entries from before `from`: the reader drops what it has). Returns the unfollow.
   */
  follow(key: string, from: string, onRows: (rows: LogRows) => void): () => void {
    let tail = this.tails.get(key);
    if (!tail) {
      tail = new Tail(key, this.deps.openBlocking(), from, this.deps.blockMs);
      this.tails.set(key, tail);
    }
    const joined = tail;
    joined.listeners.add(onRows);
    return () => {
      joined.listeners.delete(onRows);
      if (joined.listeners.size > 0 || this.tails.get(key) !== joined) return;
      this.tails.delete(key);
      joined.close();
    };
  }

  /** Logs followed live right now (each holds one Redis connection). */
  get size(): number {
    return this.tails.size;
  }

  close(): void {
    for (const tail of this.tails.values()) tail.close();
    this.tails.clear();
  }
}
