import { replicated } from '../../infra/redis.js';
import { untilRedisReady } from '../../infra/retry.js';
import { kindCode, logEntryId, ACKED_FIELD, type RelayKind, type RelayTarget } from './protocol.js';
import { withEventId } from '../stream/sse.js';
import { deliveredChoices, readRelayLog } from './log.js';
import type { ChoiceState } from '../stream/choices.js';
import { RelayCall, type Message, type RelayReply } from './relay-call.js';
import type { BatchMember, RelayBatch } from './relay-batch.js';

/** How long a stream's end waits for a replica's confirmation, and how often it is sent again unconfirmed. */
const END_REPLICA_WAIT_MS = 1000;
const END_CONFIRMATIONS = 3;

/** How often a finished stream's worker reads whether the web process has acknowledged its answer. */
const ACK_POLL_MS = 10;

/**
 * The worker's end of one request's relay. SSE events are coalesced per event-loop turn into one
 * message; messages stay here until Redis has taken them, published and logged. Whether the
 * client is still there is not decided here: the web process says so (a cancel message), or its
 * liveness key expires.
 */
export class RelayPublisher implements BatchMember {
  private seq: number;
  /** The sequence number of the last SSE event framed (see sse.ts). */
  private eventId: number;
  /** Still published on the web process's channel; a detached resumable request only appends to its log. */
  private publishing = true;
  private pending: string[] = [];
  private unsent: Message[] = [];
  /**
   * How many of `unsent` (from the front) are in a call whose reply has not come yet: the next
   * batch sends only what follows them. A Redis round trip spans several event-loop turns, and
   * sending them again each turn multiplied the relay's traffic (and the web tier's work).
   */
  private inFlight = 0;
  /** Told when nothing is in flight any more (see settled()). */
  private onSettled: (() => void)[] = [];
  /**
   * The last seq a subscriber of the web process's channel took: what reached the web process
   * holding the client. A message a subscriber took may still have died with that process (at
   * most the last relay call's worth).
   */
  private receivedSeq = 0;
  /** The end, when it went out before the record (sendEnd): finish then records and marks it, sending no other. */
  private endSent: Message | undefined;
  private unsentBytes = 0;
  private lastTtlRefresh = performance.now();

  constructor(
    private readonly batch: RelayBatch,
    private readonly target: RelayTarget,
    /** Where numbering starts: the next relay message, and the last SSE event already sent (0 for none). */
    start: { seq: number; eventId: number },
    /** Called once the messages Redis has not taken yet exceed `maxBufferedBytes` (a long outage). */
    private readonly onOverflow: () => void = () => undefined,
    private readonly maxBufferedBytes = 4 * 1024 * 1024,
  ) {
    this.seq = start.seq;
    this.eventId = start.eventId;
  }

  /** The web process's channel: publishers with the same one share a relay call. */
  get channel(): string {
    return this.target.channel;
  }

  /**
   * Queues one ready-to-write SSE event (`data: …\n\n`), numbered, sent at the end of this turn
   * when `urgent` (a stream's first token), else within the batch's coalescing time.
   */
  sse(event: string, urgent = true): void {
    this.pending.push(this.numbered(event));
    this.batch.add(this, urgent);
  }

  /** The sequence number the next SSE event gets, for a wire format that also writes it in the event's data. */
  get nextEventId(): number {
    return this.eventId + 1;
  }

  /** An SSE event with the next sequence number, for a message of its own (the usage chunk at the end). */
  numbered(event: string): string {
    return withEventId(++this.eventId, event);
  }

  /**
   * The request's client left and it is resumable: nobody listens on the web process's channel for
   * it any more, so messages only go to the relay log, where readers of the resumed stream follow it.
   */
  stopPublishing(): void {
    this.publishing = false;
  }

  /** Adds a log-only entry (the upstream's usage), so a re-run of the job can bill it exactly. */
  note(kind: 'usage', payload: string): void {
    this.seal();
    this.push({ seq: this.seq - 1, kind, payload });
    this.batch.add(this);
  }

  /** Bytes of messages Redis has not taken yet. */
  get buffered(): number {
    return this.unsentBytes;
  }

  /**
   * Adds this request's part to `call`: every message not yet taken by Redis and, at the `end`, the
   * recorded mark and the ended TTL. Returns the last message included (undefined: none), or null
   * when there was nothing to add.
   */
  appendTo(call: RelayCall, end = false): Message | undefined | null {
    this.seal();
    const from = this.inFlight;
    const count = this.unsent.length - from;
    if (count === 0 && !end) return null;
    let ttl = 0;
    if (end) ttl = this.batch.ttls.endedSeconds;
    else if (performance.now() - this.lastTtlRefresh > (this.batch.ttls.runningSeconds * 1000) / 3) {
      this.lastTtlRefresh = performance.now();
      ttl = this.batch.ttls.runningSeconds;
    }
    const { args } = call;
    call.keys.push(this.target.logKey, this.target.stateKey);
    args.push(this.target.requestId, this.publishing ? '1' : '0', String(ttl), end ? '1' : '0', String(count));
    for (let i = from; i < this.unsent.length; i++) {
      const m = this.unsent[i]!;
      args.push(logEntryId(m.seq, m.kind === 'usage'), String(m.seq), kindCode(m.kind), m.payload);
    }
    this.inFlight = this.unsent.length;
    return this.unsent.at(-1);
  }

  /**
   * Redis took the messages up to `through` (a log append refused as a duplicate was taken by an
   * earlier attempt whose reply was lost). Returns the error Redis met, if it refused an append.
   */
  confirm(through: Message | undefined, failed: string | undefined, receivedSeq = 0): Error | undefined {
    const last = through === undefined ? -1 : this.unsent.indexOf(through);
    for (const m of this.unsent.splice(0, last + 1)) this.unsentBytes -= m.payload.length;
    this.inFlight = Math.max(0, this.inFlight - (last + 1));
    this.receivedSeq = Math.max(this.receivedSeq, receivedSeq);
    if (this.inFlight === 0) this.settle();
    return failed ? new Error(failed) : undefined;
  }

  /**
   * A call carrying this publisher's messages failed: send every message Redis has not confirmed
   * again (the log refuses those an unanswered call did take, and the web drops repeats).
   */
  resend(): void {
    this.inFlight = 0;
    this.settle();
  }

  /** The last seq a subscriber took (0: none): every message up to it reached the web process. */
  get received(): number {
    return this.receivedSeq;
  }

  /**
   * Resolves once no call is waiting for Redis's reply (or after `timeoutMs`), so `received`
   * counts every message sent so far.
   */
  settled(timeoutMs: number): Promise<void> {
    if (this.inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.onSettled.push(() => (clearTimeout(timer), resolve()));
    });
  }

  /** The seq of the last message made so far (0: only `picked`); events of this turn not yet sealed into one are not counted. */
  get lastSeq(): number {
    return this.seq - 1;
  }

  /**
   * The last message the web process holding the client acknowledged handing to it (relay/acks.ts);
   * undefined when it acknowledged none, and so handed its client no part of the answer.
   */
  async webAcked(): Promise<number | undefined> {
    const acked = await this.batch.redis.hget(this.target.stateKey, ACKED_FIELD);
    return acked === null ? undefined : Number(acked);
  }

  /**
   * Waits until the web process has acknowledged message `seq`, `signal` aborts (it was found gone,
   * or its client left) or `timeoutMs` passes. Polled: it costs a few small reads per request,
   * at its end, never a read per token.
   */
  async webTook(seq: number, signal: AbortSignal, timeoutMs: number): Promise<void> {
    const until = performance.now() + timeoutMs;
    // A detached resumable request has no web process handing it on (its readers follow the relay
    // log): nothing will acknowledge it, and nothing is waited for.
    while (this.publishing && !signal.aborted && performance.now() < until) {
      const acked = await this.webAcked().catch(() => undefined);
      if (acked !== undefined && acked >= seq) return;
      await new Promise<void>((resolve) => {
        const t = setTimeout(done, ACK_POLL_MS);
        function done() {
          clearTimeout(t);
          signal.removeEventListener('abort', done);
          resolve();
        }
        signal.addEventListener('abort', done, { once: true });
      });
    }
  }

  /**
   * Each of `n` choices through message `seq`: the SSE events of the messages up to it, read back
   * from the relay log (which holds exactly what was published). Read once, when a job stops for a
   * dead web process, never on the way of a chunk.
   */
  async choicesThrough(seq: number, n: number): Promise<ChoiceState[]> {
    if (seq <= 0) return deliveredChoices([], n);
    const log = await readRelayLog(this.batch.redis, this.target.logKey);
    return deliveredChoices(
      log.filter((e) => e.seq <= seq),
      n,
    );
  }

  private settle(): void {
    for (const f of this.onSettled.splice(0)) f();
  }

  /**
   * Sends the end now, ahead of its record (a whole answer whose record waits for its web process's
   * acknowledgement); finish() then records it and adds the `recorded` mark. Returns its seq.
   */
  async sendEnd(kind: RelayKind, payload: string): Promise<number> {
    this.seal();
    const end = { seq: this.seq++, kind, payload };
    this.push(end);
    this.endSent = end;
    await this.flushNow();
    return end.seq;
  }

  /** The end is in the relay log already (a take-over finds it there): finish() records it and sends no other. */
  endedWith(end: Message): void {
    this.endSent = end;
    this.seq = Math.max(this.seq, end.seq + 1);
  }

  /** Sends what is waiting now, in a call of its own, and waits for Redis (left for the next try when it cannot). */
  async flushNow(): Promise<void> {
    const call = new RelayCall(this.channel);
    const through = this.appendTo(call);
    if (through === null) return;
    try {
      const reply = await call.send(this.batch.redis);
      this.confirm(through, reply.errors[0], reply.received[0]);
    } catch {
      this.resend();
      this.batch.add(this);
    }
  }

  /**
   * Ends the request: first `record` (the usage record and quota settlement, which live in other
   * slots), then every message not yet sent, the last one and the `recorded` mark in one call.
   * The client sees the end only once the usage is safe, and a re-run finds the request recorded
   * only then. The whole is retried until Redis takes it (every step is safe to repeat) or
   * `deadline` passes, when it throws. On a Redis Cluster with replicas the end is also confirmed
   * on a replica, and sent again if it was not: a failover right after it must not lose the one
   * message that tells the client its stream is over. After sendEnd, the end went out first and
   * this records it and adds the mark.
   */
  async finish(kind: RelayKind, payload: string, record: () => Promise<unknown>, deadline = Infinity): Promise<void> {
    let last = this.endSent;
    if (last === undefined) {
      this.seal();
      last = { seq: this.seq++, kind, payload };
      this.push(last);
    }
    let recorded = false;
    for (let confirmations = 0; ;) {
      try {
        if (!recorded) {
          await record();
          recorded = true;
        }
        const call = new RelayCall(this.channel);
        // Sent again after an unconfirmed try: the log refuses what it has (duplicate ids), and the
        // web process drops a message it has seen.
        if (this.unsent.length === 0 && last !== this.endSent) this.push(last);
        const through = this.appendTo(call, true) ?? undefined;
        let replies: RelayReply;
        try {
          replies = await call.send(this.batch.redis);
        } catch (err) {
          this.resend();
          throw err;
        }
        this.confirm(through, replies.errors[0], replies.received[0]);
        if (
          confirmations++ >= END_CONFIRMATIONS ||
          (await replicated(this.batch.redis, this.target.logKey, END_REPLICA_WAIT_MS))
        )
          return;
      } catch (err) {
        if (performance.now() > deadline) throw err;
        await untilRedisReady(this.batch.redis, 100, deadline);
      }
    }
  }

  /** Turns the SSE events of this turn into one message. */
  private seal(): void {
    if (this.pending.length === 0) return;
    const payload = this.pending.join('');
    this.pending = [];
    this.push({ seq: this.seq++, kind: 'sse', payload });
  }

  private push(m: Message): void {
    this.unsent.push(m);
    this.unsentBytes += m.payload.length;
    if (this.unsentBytes > this.maxBufferedBytes) this.onOverflow();
  }
}
