// The limiter's Lua scripts. Each runs atomically inside Redis, so any number of web processes
// sharing one Redis see one consistent count: the check and the increment can never interleave.
//
// Time: ARGV[1] is the caller's clock in epoch milliseconds, or '' to read Redis's own TIME (the
// production path, so web hosts with skewed clocks still agree on window boundaries). Redis 5+
// replicates script effects, so reading TIME inside a writing script is safe.
//
// Windows are fixed and aligned to UTC: minute = floor(ms / 60000), hour, day likewise (epoch
// milliseconds carry no leap seconds, so day boundaries are UTC midnight). Every count lives in
// one hash per account together with the window it belongs to; a count whose window has passed
// reads as 0, so correctness never depends on key expiry, which only collects garbage.
//
// All of an account's keys share the hash tag {accountId}, so the scripts also run on a cluster.

const NOW = `
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local MINUTE, HOUR, DAY = 60000, 3600000, 86400000
-- Keys outlive their last window by this much, so a count is never lost to expiry while it matters.
local GRACE = 60000
`;

/**
 * Admission. KEYS: counters hash, reservation expiries (zset member requestId, score expiry ms),
 * reservation amounts (hash 'r:'..requestId -> tokens, plus 'total'), guard key (in the same slot).
 * ARGV: now, requestsPerMinute, requestsPerHour, requestsPerDay, tokensPerDay, requestId,
 * reserveTokens, reservationTtlMs, '1' when guarded, the value the guard key must hold ('' = none).
 * Reply: { allowed 0|1, reason 0 none|1 requests|2 tokens, retryAfterMs, now, minuteCount,
 *          hourCount, dayCount, tokensUsed (settled today + every live reservation) },
 *        or { -1 } when the guard key no longer holds the expected value (nothing was counted).
 */
export const ADMIT_LUA = `${NOW}
if ARGV[9] == '1' and (redis.call('GET', KEYS[4]) or '') ~= ARGV[10] then return { -1 } end
local rpm, rph, rpd, tpd = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local requestId, reserve, ttl = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local m, h, d = math.floor(now / MINUTE), math.floor(now / HOUR), math.floor(now / DAY)

local f = redis.call('HMGET', KEYS[1], 'm', 'mc', 'h', 'hc', 'd', 'dc', 'tu')
local mc = (tonumber(f[1]) == m and tonumber(f[2])) or 0
local hc = (tonumber(f[3]) == h and tonumber(f[4])) or 0
local dc = (tonumber(f[5]) == d and tonumber(f[6])) or 0
local tu = (tonumber(f[5]) == d and tonumber(f[7])) or 0

-- Release reservations whose request died without settling (expiry reached).
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #expired > 0 then
  local freed = 0
  -- In chunks: unpack() of thousands of values would overflow Lua's stack.
  for i = 1, #expired, 500 do
    local fields = {}
    for j = i, math.min(i + 499, #expired) do fields[#fields + 1] = 'r:' .. expired[j] end
    local amounts = redis.call('HMGET', KEYS[3], unpack(fields))
    for j = 1, #amounts do freed = freed + (tonumber(amounts[j]) or 0) end
    redis.call('HDEL', KEYS[3], unpack(fields))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('HINCRBY', KEYS[3], 'total', -freed)
end
local reserved = tonumber(redis.call('HGET', KEYS[3], 'total')) or 0

-- Blocked on requests: wait until every exhausted window has rolled over.
local requestWait = 0
if mc >= rpm then requestWait = math.max(requestWait, (m + 1) * MINUTE - now) end
if hc >= rph then requestWait = math.max(requestWait, (h + 1) * HOUR - now) end
if dc >= rpd then requestWait = math.max(requestWait, (d + 1) * DAY - now) end

-- Blocked on tokens: settled usage resets at UTC midnight; live reservations free up at the
-- latest when they expire, so the wait is the earliest moment enough of them would have expired.
local tokenWait = 0
local need = tu + reserved + reserve - tpd
if need > 0 then
  local dayLeft = (d + 1) * DAY - now
  tokenWait = dayLeft
  if tu + reserve <= tpd then
    local live = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
    local freed = 0
    for i = 1, #live, 2 do
      freed = freed + (tonumber(redis.call('HGET', KEYS[3], 'r:' .. live[i])) or 0)
      if freed >= need then
        tokenWait = math.min(dayLeft, tonumber(live[i + 1]) - now)
        break
      end
    end
  end
end

if requestWait > 0 or tokenWait > 0 then
  -- A spent token quota outlasts a request window, so it is the reason worth reporting.
  local reason = 1
  if tokenWait > 0 then reason = 2 end
  return { 0, reason, math.max(requestWait, tokenWait), now, mc, hc, dc, tu + reserved }
end

mc, hc, dc = mc + 1, hc + 1, dc + 1
redis.call('HSET', KEYS[1], 'm', m, 'mc', mc, 'h', h, 'hc', hc, 'd', d, 'dc', dc, 'tu', tu)
redis.call('PEXPIRE', KEYS[1], (d + 1) * DAY - now + GRACE)
if reserve > 0 then
  -- Admitting the same requestId again replaces its reservation instead of holding two.
  local previous = tonumber(redis.call('HGET', KEYS[3], 'r:' .. requestId)) or 0
  redis.call('ZADD', KEYS[2], now + ttl, requestId)
  redis.call('HSET', KEYS[3], 'r:' .. requestId, reserve)
  redis.call('HINCRBY', KEYS[3], 'total', reserve - previous)
  reserved = reserved + reserve - previous
  redis.call('PEXPIRE', KEYS[2], ttl + GRACE)
  redis.call('PEXPIRE', KEYS[3], ttl + GRACE)
end
return { 1, 0, 0, now, mc, hc, dc, tu + reserved }
`;

/**
 * Settlement: swap a request's reservation for the tokens it actually used, charged to the UTC
 * day on which it ends. Idempotent: the first settle for a requestId sets a marker; later ones
 * change nothing. A reservation that already expired is simply gone; the actual tokens still count.
 * KEYS: counters hash, reservation expiries, reservation amounts, settled marker.
 * ARGV: now, requestId, actualTokens, markerTtlMs. Reply: 1 settled, 0 already settled.
 */
export const SETTLE_LUA = `${NOW}
local requestId, actual = ARGV[2], tonumber(ARGV[3])
if not redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[4]) then return 0 end
local held = tonumber(redis.call('HGET', KEYS[3], 'r:' .. requestId))
if held then
  redis.call('HDEL', KEYS[3], 'r:' .. requestId)
  redis.call('ZREM', KEYS[2], requestId)
  redis.call('HINCRBY', KEYS[3], 'total', -held)
end
local d = math.floor(now / DAY)
if tonumber(redis.call('HGET', KEYS[1], 'd')) == d then
  redis.call('HINCRBY', KEYS[1], 'tu', actual)
else
  redis.call('HSET', KEYS[1], 'd', d, 'dc', 0, 'tu', actual)
end
redis.call('PEXPIRE', KEYS[1], (d + 1) * DAY - now + GRACE)
return 1
`;

/**
 * A cooldown: allowed when the last allowed call is at least windowMs ago (sliding, not aligned
 * to any boundary). KEYS: the cooldown key. ARGV: now, windowMs. Reply: { allowed 0|1, retryAfterMs }.
 */
export const COOLDOWN_LUA = `${NOW}
local window = tonumber(ARGV[2])
local last = tonumber(redis.call('GET', KEYS[1]))
if last and now < last + window then return { 0, last + window - now } end
redis.call('SET', KEYS[1], now, 'PX', window)
return { 1, 0 }
`;
