import type { RedisClient } from '../../infra/redis.js';
import { redisScript, runScriptNow } from '../../infra/redis-scripts.js';
import { ACKED_FIELD, requestStateKey } from './protocol.js';

// What a web process tells the workers about what it handed to its clients, so that a job stopped
// for its death is billed what its client received, within one relay message, however far behind
// its event loop was. Redis counting a subscriber when it publishes says only that the message is
// on its way to this process: under load it may sit unread in a socket when the process dies.
//
// The rule, per request: a message may be handed to the client once its sequence number is at most
// the last one acknowledged (written in the request's state) plus one; a request's first message
// with part of the answer (a stream's first tokens, a whole answer) only once it is acknowledged
// itself. Whatever else arrives waits for the next acknowledgement. So what the client received
// always lies between the acknowledged message and the one after it, and a stopped job bills
// through the one after it (job/billable.ts, `billedThrough`).
//
// Acknowledgements cost no Redis write per token: one script call per web process covers every
// request with messages waiting, sent every RELAY_ACK_INTERVAL_MS while any wait, and at the end
// of the event-loop turn for a request's first part of the answer (its time to first token). The
// messages it covers are handed over in the same turn, right after the call is written to the
// connection, so neither the acknowledgement nor the client's bytes wait for Redis's reply; a
// process killed between the two writes bills at most what that one call covered.

/** KEYS: request states; ARGV: the acknowledged seq of each. A state that expired is not made again. */
const ACK = redisScript(
  'relay-ack',
  `
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('HSET', KEYS[i], '${ACKED_FIELD}', ARGV[i]) end
end
return #KEYS`,
);

interface Held {
  seq: number;
  billable: boolean;
  deliver: () => void;
}

interface Gate {
  /** The last seq acknowledged (0: none; seq 0 is `picked`, which carries nothing billable). */
  acked: number;
  /** An acknowledgement has covered part of the answer: the one-message allowance applies. */
  answered: boolean;
  held: Held[];
}

/** A request's gate: its messages pass through it, in order, to the client. */
export interface AckGate {
  /** Hands `deliver` on now, or once an acknowledgement covers `seq` (see the rule above). */
  pass(seq: number, billable: boolean, deliver: () => void): void;
  /** The request ended here: nothing more passes, and what waits is dropped. */
  close(): void;
}

export class RelayAcks {
  private readonly gates = new Map<string, Gate>();
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;

  constructor(
    private readonly deps: {
      redis: RedisClient;
      prefix: string;
      /** This web process's instance name: its requests' state keys carry its hash tag. */
      instance: string;
      intervalMs: number;
      onFailure?: (err: unknown) => void;
    },
  ) {}

  open(requestId: string): AckGate {
    const gate: Gate = { acked: 0, answered: false, held: [] };
    this.gates.set(requestId, gate);
    return {
      pass: (seq, billable, deliver) => this.pass(gate, seq, billable, deliver),
      close: () => {
        gate.held = [];
        if (this.gates.get(requestId) === gate) this.gates.delete(requestId);
      },
    };
  }

  /** The process is stopping: what waits is acknowledged and handed on now, not left behind. */
  stop(): void {
    this.acknowledge();
  }

  private pass(gate: Gate, seq: number, billable: boolean, deliver: () => void): void {
    if (gate.held.length === 0 && (!billable || seq <= gate.acked + (gate.answered ? 1 : 0))) return deliver();
    gate.held.push({ seq, billable, deliver });
    if (billable && !gate.answered) this.immediate ??= setImmediate(() => this.acknowledge()).unref();
    else this.timer ??= setTimeout(() => this.acknowledge(), this.deps.intervalMs).unref();
  }

  /**
   * One call acknowledging every waiting message, then those messages handed on. Sent only on a
   * ready connection (a command refused for want of one would hand on what Redis never heard of);
   * otherwise everything waits for the next interval. Called by the timers.
   */
  acknowledge(): void {
    clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    const waiting = [...this.gates].filter(([, g]) => g.held.length > 0);
    if (waiting.length === 0) return;
    const { redis, prefix, instance } = this.deps;
    if (redis.status !== 'ready') {
      this.timer = setTimeout(() => this.acknowledge(), this.deps.intervalMs).unref();
      return;
    }
    const keys = waiting.map(([id]) => requestStateKey(prefix, instance, id));
    const seqs = waiting.map(([, g]) => String(g.held.at(-1)!.seq));
    // Written now, before the messages go to their clients (see above), never held for an auto-pipeline.
    runScriptNow(redis, ACK, keys, seqs).catch((err: unknown) => this.deps.onFailure?.(err));
    for (const [, gate] of waiting) {
      const held = gate.held;
      gate.held = [];
      gate.acked = held.at(-1)!.seq;
      if (held.some((h) => h.billable)) gate.answered = true;
      for (const h of held) h.deliver();
    }
  }
}
