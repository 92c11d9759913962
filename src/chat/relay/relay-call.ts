import type { RedisClient } from '../../infra/redis.js';
import { redisScript, runScript } from '../../infra/redis-scripts.js';
import type { LogKind } from './protocol.js';

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

const RELAY = redisScript('relay-append', RELAY_LUA);

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
    const [errors, received] = (await runScript(redis, RELAY, this.keys, this.args)) as [string[], number[]];
    return { errors, received: received.map(Number) };
  }
}
