import { replicated, type RedisClient } from '../../infra/redis.js';
import {
  encodeRelay,
  kindCode,
  logEntryId,
  readerField,
  relayChannel,
  relayLogKey,
  requestStateKey,
  type LogKind,
  type RelayKind,
  ACKED_FIELD,
  STALLED_FIELD,
} from './protocol.js';
import { withEventId } from '../stream/sse.js';
import { deliveredChoices, readRelayLog } from './log.js';
import type { ChoiceState } from '../stream/choices.js';

/**
 * Where one request's relay goes: the web process's channel, the relay log, the request's state.
 * All three carry the web process's hash tag, so a MULTI or script over them touches one slot.
 */
export interface RelayTarget {
  requestId: string;
  channel: string;
  logKey: string;
  stateKey: string;
}

export function relayTarget(prefix: string, relayTo: string, requestId: string): RelayTarget {
  return {
    requestId,
    channel: relayChannel(prefix, relayTo),
    logKey: relayLogKey(prefix, relayTo, requestId),
    stateKey: requestStateKey(prefix, relayTo, requestId),
  };
}

export interface RelayTtls {
  /** How long a running request's log and state live without being touched (renewed as it runs). */
  runningSeconds: number;
  /** How long they are kept once the request has ended (a late reader, a resumed stream). */
  endedSeconds: number;
}

// The claim, in one round trip: take the request if nobody holds it (a first run) or if told to
// (a re-run taking over from a dead worker), log and announce `picked`, and say who held it before.
// A first run also writes who may read the request back (its account) and how (a stream, a
// resumable one); a resumable request counts its client's connection as a reader, unless that
// client left before the claim (its web process already counted it out, leaving the field at 0).
// A request already recorded is left as it is: its state keeps the ended lifetime (a job BullMQ
// handed out again after a Redis restart must not give it back the running one). The web process
// marks a request whose client left `cancelled`, so whoever claims it, first or on a take-over,
// honours the cancel. The channel is passed as a key: on a cluster it must hash to the script's
// slot, as it does. A worker's watchdog marks the requests of a worker it ends for a stalled event
// loop `stalled`; a take-over counts itself in `takeovers`: the claim reads both for the take-over.
// Reply: { taken 0|1, previous owner ('' if none), recorded '0'|'1', left before the claim 0|1, cancelled 0|1,
// stalled 0|1, take-overs so far, this one included }.
const CLAIM_LUA = `
local owner = redis.call('HGET', KEYS[1], 'worker')
local recorded = redis.call('HGET', KEYS[1], 'recorded') or '0'
local cancelled = redis.call('HGET', KEYS[1], 'cancelled') == '1' and 1 or 0
local stalled = redis.call('HGET', KEYS[1], '${STALLED_FIELD}') == '1' and 1 or 0
if recorded == '1' or (owner and owner ~= ARGV[1] and ARGV[4] ~= '1') then return { 0, owner or '', recorded, 0, cancelled, stalled, 0 } end
redis.call('HSET', KEYS[1], 'worker', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
local takeovers = 0
if owner and owner ~= ARGV[1] then takeovers = redis.call('HINCRBY', KEYS[1], 'takeovers', 1) end
local left = 0
if not owner then
  redis.call('HSET', KEYS[1], 'account', ARGV[5], 'stream', ARGV[6], 'resumable', ARGV[7] == '' and '0' or '1')
  if ARGV[7] ~= '' and redis.call('HSETNX', KEYS[1], ARGV[7], 1) == 0 then left = 1 end
  redis.call('XADD', KEYS[2], '1-0', 'k', 'p', 'p', '')
  redis.call('EXPIRE', KEYS[2], ARGV[3])
  redis.call('SPUBLISH', KEYS[3], ARGV[2])
end
return { 1, owner or '', recorded, left, cancelled, stalled, takeovers }
`;

type ClaimRedis = RedisClient & {
  relayClaim(
    stateKey: string,
    logKey: string,
    channel: string,
    workerId: string,
    picked: string,
    ttl: number,
    force: string,
    account: string,
    stream: string,
    reader: string,
  ): Promise<[number, string, string, number, number, number, number]>;
};

export interface Claim {
  /** This worker holds the request now. */
  taken: boolean;
  /** Who held it before ('' for a first run). */
  previousOwner: string;
  /** Its usage is recorded: nothing is left to do. */
  recorded: boolean;
  /** A resumable request whose client left before this first claim: its grace period starts now. */
  leftBeforeClaim: boolean;
  /** Its client left (a web process marked it): nothing more is to be produced for it. */
  cancelled: boolean;
  /** A worker running it was ended for a stalled event loop: running it again may stall the next. */
  stalled: boolean;
  /** How many times it has been taken over from a dead worker, this claim included. */
  takeovers: number;
}

/** What a first claim records about the request, for those who read it back. */
export interface ClaimedRequest {
  accountId: string;
  stream: boolean;
  /** The web process whose client counts as the first reader of a resumable request; undefined when not resumable. */
  resumableFor: string | undefined;
}

/**
 * A worker's first step with a job. A first run takes the request and announces `picked` (seq 0).
 * A job someone else holds is taken only with `force` (its owner is known to be dead).
 */
export async function claimRequest(
  redis: RedisClient,
  target: RelayTarget,
  workerId: string,
  ttlSeconds: number,
  request: ClaimedRequest,
  force = false,
): Promise<Claim> {
  const r = redis as ClaimRedis;
  if (typeof r.relayClaim !== 'function') r.defineCommand('relayClaim', { numberOfKeys: 3, lua: CLAIM_LUA });
  const reader = request.resumableFor === undefined ? '' : readerField(request.resumableFor);
  const [taken, owner, recorded, left, cancelled, stalled, takeovers] = await r.relayClaim(
    target.stateKey,
    target.logKey,
    target.channel,
    workerId,
    encodeRelay(target.requestId, 0, 'picked'),
    ttlSeconds,
    force ? '1' : '0',
    request.accountId,
    request.stream ? '1' : '0',
    reader,
  );
  // This worker as the previous owner: a retried claim whose first reply was lost (it had taken the
  // request then). That is still a first run, not a take-over.
  return {
    taken: Number(taken) === 1,
    previousOwner: owner === workerId ? '' : owner,
    recorded: recorded === '1',
    leftBeforeClaim: Number(left) === 1,
    cancelled: Number(cancelled) === 1,
    stalled: Number(stalled) === 1,
    takeovers: Number(takeovers),
  };
}

export interface Message {
  seq: number;
  kind: LogKind;
  payload: string;
}

// Relay messages, in one round trip and one command for a web process's channel, however many
// requests and messages: each appended to its request's relay log (at its logEntryId) and published on the channel as `<requestId>|<seq>|<kind>|<payload>` (see
// relay/protocol.ts), so the payload crosses the wire once and the worker builds no second copy of
// it. An append refused as a duplicate was taken by an earlier try whose reply was lost; it is
// published again all the same (the web process drops a message it has seen). Then the request's
// `recorded` mark and a new TTL for its log and state, when asked.
// SPUBLISH answers how many subscribers took each message: the reply carries, per request, the
// last seq a subscriber took, so a job stopped for a dead web process bills only what reached it,
// at no cost of its own (the reply is sent anyway).
// KEYS: the channel, then each request's log and state (all with the web process's hash tag: one slot).
// ARGV, per request: its id, publish 0|1, TTL seconds (0: leave), recorded 0|1, the message count n,
// then n × (log entry id, seq, kind code, payload). Reply: { per request '' or the first error an
// append met, per request the last seq published to at least one subscriber (0: none) }.
const RELAY_LUA = `
local a, errors, received = 1, {}, {}
for k = 2, #KEYS, 2 do
  local log, state = KEYS[k], KEYS[k + 1]
  local id, publish, ttl, n = ARGV[a], ARGV[a + 1] == '1', tonumber(ARGV[a + 2]), tonumber(ARGV[a + 4])
  local recorded = ARGV[a + 3] == '1'
  a = a + 5
  local failed, got = '', 0
  for i = 1, n do
    local entry, seq, kind, payload = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    a = a + 4
    local note = kind == 'u'
    local r = redis.pcall('XADD', log, entry, 'k', kind, 'p', payload)
    if type(r) == 'table' and r.err and failed == '' and not string.find(r.err, 'equal or smaller', 1, true) then
      failed = r.err
    end
    if publish and not note and redis.call('SPUBLISH', KEYS[1], id .. '|' .. seq .. '|' .. kind .. '|' .. payload) > 0 then
      got = tonumber(seq)
    end
  end
  if recorded then redis.call('HSET', state, 'recorded', '1') end
  if ttl > 0 then
    redis.call('EXPIRE', log, ttl)
    redis.call('EXPIRE', state, ttl)
  end
  errors[#errors + 1] = failed
  received[#received + 1] = got
end
return { errors, received }
`;

type RelayRedis = RedisClient & {
  relayAppend(numKeys: number, keys: string[], args: string[]): Promise<[string[], number[]]>;
};

/** A relay call's reply, per request in call order. */
export interface RelayReply {
  /** '' or the error an append met. */
  errors: string[];
  /** The last seq a subscriber of the channel took (0: none). */
  received: number[];
}

/** One relay script call being built: a web process's channel, then each request's part. */
export class RelayCall {
  readonly keys: string[];
  readonly args: string[] = [];

  constructor(channel: string) {
    this.keys = [channel];
  }

  get requests(): number {
    return (this.keys.length - 1) / 2;
  }

  /** Sends it: per request, the error an append met and the last seq a subscriber took. */
  async send(redis: RedisClient): Promise<RelayReply> {
    const r = redis as RelayRedis;
    if (typeof r.relayAppend !== 'function') r.defineCommand('relayAppend', { lua: RELAY_LUA });
    const [errors, received] = await r.relayAppend(this.keys.length, this.keys, this.args);
    return { errors, received: received.map(Number) };
  }
}

/** How long a stream's end waits for a replica's confirmation, and how often it is sent again unconfirmed. */
const END_REPLICA_WAIT_MS = 1000;
const END_CONFIRMATIONS = 3;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** How often a finished stream's worker reads whether the web process has acknowledged its answer. */
const ACK_POLL_MS = 10;

/**
 * Publishing for every request of a worker process: one relay script call (RELAY_LUA) per web
 * process per event-loop turn carries its streams' new messages, each published and appended to its
 * relay log (so what the log holds is exactly what was published); a web process's keys share one
 * slot, so on a cluster each call goes to one shard. When Redis cannot be reached the messages stay with their publishers
 * and the batch tries again once the connection is back: a Redis restart costs the client a pause,
 * not its answer.
 */
export class RelayBatch {
  private dirty = new Set<RelayPublisher>();
  private scheduled = false;
  private retrying = false;
  /** Publishers whose new events wait for the coalescing timer (see `add`). */
  private waiting = new Set<RelayPublisher>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly redis: RedisClient,
    readonly ttls: RelayTtls,
    private readonly onFailure: (err: unknown) => void = () => undefined,
    /**
     * How long events that are not urgent may wait to share a message (0: to the end of the turn).
     * A stream's first token goes at once; later ones from an upstream faster than one token per
     * `coalesceMs` travel a few at a time, which saves a log append, a publish and a client write
     * each, at the cost of at most `coalesceMs` on their way.
     */
    private readonly coalesceMs = 0,
  ) {}

  add(publisher: RelayPublisher, urgent = true): void {
    if (!urgent && this.coalesceMs > 0) {
      this.waiting.add(publisher);
      this.timer ??= setTimeout(() => {
        this.timer = undefined;
        for (const p of this.waiting) this.dirty.add(p);
        this.waiting.clear();
        this.schedule();
      }, this.coalesceMs).unref();
      return;
    }
    this.dirty.add(publisher);
    this.schedule();
  }

  private schedule(): void {
    if (!this.scheduled && !this.retrying && this.dirty.size > 0) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
  }

  private async flush(): Promise<void> {
    this.scheduled = false;
    const byChannel = new Map<string, RelayPublisher[]>();
    for (const publisher of this.dirty) {
      const group = byChannel.get(publisher.channel);
      if (group) group.push(publisher);
      else byChannel.set(publisher.channel, [publisher]);
    }
    this.dirty.clear();
    const failed = (await Promise.all([...byChannel.values()].map((group) => this.send(group)))).some((ok) => !ok);
    if (failed) await this.retryLater();
  }

  /** One script call for one web process's publishers; false when Redis could not take it (they stay dirty). */
  private async send(publishers: RelayPublisher[]): Promise<boolean> {
    const call = new RelayCall(publishers[0]!.channel);
    const spans: { publisher: RelayPublisher; through: Message | undefined }[] = [];
    for (const publisher of publishers) {
      const through = publisher.appendTo(call);
      if (through !== null) spans.push({ publisher, through });
    }
    if (spans.length === 0) return true;
    let replies: RelayReply;
    try {
      replies = await call.send(this.redis);
    } catch (err) {
      this.onFailure(err);
      for (const sp of spans) {
        sp.publisher.resend();
        this.dirty.add(sp.publisher);
      }
      return false;
    }
    spans.forEach((sp, i) => {
      const refused = sp.publisher.confirm(sp.through, replies.errors[i], replies.received[i]);
      if (refused) this.onFailure(refused);
    });
    return true;
  }

  /** Waits for the connection to be ready again (polling, since ready may come and go), then flushes. */
  private async retryLater(): Promise<void> {
    if (this.retrying) return;
    this.retrying = true;
    do await sleep(100);
    while (this.redis.status !== 'ready');
    this.retrying = false;
    if (this.dirty.size > 0 && !this.scheduled) {
      this.scheduled = true;
      setImmediate(() => void this.flush());
    }
  }
}

/**
 * The worker's end of one request's relay. SSE events are coalesced per event-loop turn into one
 * message; messages stay here until Redis has taken them, published and logged. Whether the
 * client is still there is not decided here: the web process says so (a cancel message), or its
 * liveness key expires.
 */
export class RelayPublisher {
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
        // A cluster stays 'ready' while one master fails over: pause between tries either way.
        do await sleep(100);
        while (this.batch.redis.status !== 'ready' && performance.now() <= deadline);
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
