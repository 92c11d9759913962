import type { RedisClient } from '../../infra/redis.js';
import type { Timers } from '../../clock.js';
import { failedEvent, type CompletionStream } from '../stream/completion-stream.js';
import { lostRelay, relayFailure, silenceError } from '../stream/completion-errors.js';
import type { RelayHandler } from './hub.js';
import type { AckGate } from './acks.js';
import { readRelayLog } from './log.js';
import type { RelayError, RelayMessage } from './protocol.js';

/**
 * Feeds a live stream from its request's relay messages, in sequence. A message seen twice (sent
 * again after a Redis restart) is dropped; one that skips ahead means some were lost on the way,
 * and they are read from the relay log, where the worker wrote them too. A gap the log cannot
 * fill, or a silence longer than a worker may keep, ends the stream with an error. Messages reach
 * the stream through the web process's acknowledgements (relay/acks.ts), in the same order.
 */
export class InOrderRelay implements RelayHandler {
  private expected = 0;
  /** The highest sequence number seen ahead of `expected`. */
  private highestSeen = -1;
  /** Whether the stream has carried events (its headers were sent). */
  private started = false;
  private silenceTimer: unknown;
  private resyncing: Promise<void> | undefined;
  private resyncAgain = false;

  constructor(
    private readonly stream: CompletionStream,
    private readonly deps: {
      redis: RedisClient;
      /** The request's relay log. */
      logKey: string;
      timers: Timers;
      /** How long the worker may send nothing. */
      silenceLimitMs: number;
      /** Told once, at the first message: a worker has the job. */
      picked: () => void;
      /** Where messages wait, past the last acknowledgement, before they reach the client. */
      gate: AckGate;
    },
  ) {}

  message(m: RelayMessage | undefined): void {
    if (this.stream.state === 'ended') return;
    if (!m) return this.gap();
    if (m.seq < this.expected) return;
    if (m.seq > this.expected) {
      this.highestSeen = Math.max(this.highestSeen, m.seq);
      return this.resync();
    }
    this.take(m);
  }

  /** Reads what was missed from the relay log, one read at a time (a request during one runs after it). */
  resync(): void {
    if (this.stream.state === 'ended') return;
    if (this.resyncing) {
      this.resyncAgain = true;
      return;
    }
    this.resyncing = this.readMissed().finally(() => (this.resyncing = undefined));
  }

  stop(): void {
    this.deps.timers.clearTimeout(this.silenceTimer);
    this.deps.gate.close();
  }

  private async readMissed(): Promise<void> {
    do {
      this.resyncAgain = false;
      let entries;
      try {
        entries = await readRelayLog(this.deps.redis, this.deps.logKey, this.expected);
      } catch {
        // Redis is not back for this connection yet; the hub asks again after its reconnect.
        return;
      }
      for (const e of entries) {
        if (this.stream.state === 'ended') return;
        if (e.kind === 'usage' || e.seq < this.expected) continue;
        if (e.seq > this.expected) return this.gap();
        this.take(e as RelayMessage);
      }
      // A message was seen that the log does not have: it cannot be filled any more.
      if (this.stream.state !== 'ended' && this.highestSeen >= this.expected) return this.gap();
    } while (this.resyncAgain && this.stream.state !== 'ended');
  }

  private take(m: RelayMessage): void {
    const { stream, deps } = this;
    this.expected = m.seq + 1;
    deps.timers.clearTimeout(this.silenceTimer);
    this.silenceTimer = deps.timers.setTimeout(
      () => stream.end('silence', failedEvent(silenceError(), this.started)),
      deps.silenceLimitMs,
    );
    if (stream.state === 'queued') {
      // 'picked' itself may be the message that was lost: any message means a worker has the job.
      deps.picked();
      stream.push({ kind: 'picked' });
    }
    deps.gate.pass(m.seq, m.kind === 'sse' || m.kind === 'final', () => this.deliver(m));
  }

  private deliver(m: RelayMessage): void {
    const { stream } = this;
    if (stream.state === 'ended') return;
    switch (m.kind) {
      case 'picked':
        return;
      case 'sse':
        this.started = true;
        return stream.push({ kind: 'events', payload: m.payload });
      case 'final':
        return stream.end('completed', { kind: 'final', body: m.payload });
      case 'done':
        return stream.end('completed', { kind: 'done', payload: m.payload, lastEventId: 0 });
      case 'error': {
        let error: RelayError;
        try {
          error = JSON.parse(m.payload) as RelayError;
        } catch {
          return this.gap();
        }
        return stream.end('failed', failedEvent(relayFailure(error), this.started, error.events));
      }
    }
  }

  private gap(): void {
    this.stream.end('relay_gap', failedEvent(lostRelay(), this.started));
  }
}
