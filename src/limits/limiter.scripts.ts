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

/** The time every script works in (see above), and the window sizes. */
export const NOW = `
local now = tonumber(ARGV[1])
if not now then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local MINUTE, HOUR, DAY = 60000, 3600000, 86400000
-- Keys outlive their last window by this much, so a count is never lost to expiry while it matters.
local GRACE = 60000
local SPEND_GRACE = DAY
-- Numbers handed to Redis as integers, whatever their size (nano-USD run past 10^14).
local function int(x) return string.format('%d', x) end
`;

/**
 * Admission. KEYS: counters hash, reservation expiries (zset member requestId, score expiry ms),
 * reservation amounts (hash 'r:'..requestId -> tokens, plus 'total'), guard key (in the same slot),
 * the spending limit's hash for the request's month (see SPEND below), the API key's own counters
 * (a hash in the account's slot; any key of the account when the key has no limit).
 * ARGV: now, requestsPerMinute, requestsPerHour, requestsPerDay, tokensPerDay, requestId,
 * reserveTokens, reservationTtlMs, '1' when guarded, the value the guard key must hold ('' = none),
 * the spending limit in nano-USD ('' = none), the request's most possible cost in nano-USD, the
 * month's end (epoch ms), the month's spend so far from the ledger ('' = not read), the API key's
 * own requests per minute ('' = none), the API key's own spending limit in nano-USD ('' = none),
 * the key's spend this month from the ledger ('' = not read), the API key's id ('' = none).
 * Reply: { allowed 0|1, reason 0 none|1 requests|2 tokens|3 spend, retryAfterMs, now, minuteCount,
 *          hourCount, dayCount, tokensUsed (settled today + every live reservation),
 *          spendUsed (the month's settled spend + every live spend reservation, nano-USD),
 *          1 when this refusal is the month's first by the spending limit reached by settled spend,
 *          1 when only reservations of requests in flight stand in the refusing quota's way (see HELD),
 *          the key's requests this minute (with this one when admitted; 0 without a key limit) },
 *        or { -1 } when the guard key no longer holds the expected value (nothing was counted),
 *        or { -2, 1 when the account's figure is missing, 1 when the key's is } when a month's spend a
 *        limit needs is not in Redis and no ledger figure came with the call (nothing was counted).
 *
 * SPEND: one hash per account and UTC month: 'spent' (settled nano-USD; present once the month's
 * figure was seeded), 'held' (the sum of live reservations), 'r:'..requestId (one reservation),
 * 'stop' (the limit has refused a request this month). Its reservations expire with the token
 * ones (same zset). The hash outlives its month by SPEND_GRACE, so late settlements still land.
 * An API key with a spending limit of its own keeps its month in the same hash: 'k:'..keyId..':spent'
 * (seeded from the ledger's rows of that key), 'k:'..keyId..':held', and 'kr:'..requestId, one
 * reservation as '<keyId> <nano-USD>', so an expired one finds its key. Every reservation is also
 * held in the account's 'held': the account's limit stays the ceiling over all of its keys.
 *
 * HELD: a quota (tokens or spend) that settled usage alone leaves room for, but live reservations
 * fill, frees as those requests end, usually within seconds: the reply says so, and retryAfterMs
 * then covers only the request windows, so the caller can ask for a short wait instead of the reset.
 */
export const ADMIT_LUA = `${NOW}
if ARGV[9] == '1' and (redis.call('GET', KEYS[4]) or '') ~= ARGV[10] then return { -1 } end
local spendLimit, keySpendLimit, keyId = tonumber(ARGV[11]), tonumber(ARGV[16]), ARGV[18]
-- A month's settled spend, seeded from the ledger figure the caller read when Redis has none.
local function seeded(field, seed)
  local s = redis.call('HGET', KEYS[5], field)
  if s then return tonumber(s) end
  if seed == '' then return nil end
  redis.call('HSET', KEYS[5], field, seed)
  redis.call('PEXPIRE', KEYS[5], int(math.max(tonumber(ARGV[13]) - now, 0) + SPEND_GRACE))
  return tonumber(seed)
end
local spent, kspent = 0, 0
if spendLimit then spent = seeded('spent', ARGV[14]) end
if keySpendLimit then kspent = seeded('k:' .. keyId .. ':spent', ARGV[17]) end
if spent == nil or kspent == nil then
  return { -2, (spent == nil and 1) or 0, (kspent == nil and 1) or 0 }
end
local rpm, rph, rpd, tpd = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local requestId, reserve, ttl = ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8])
local sreserve = ((spendLimit or keySpendLimit) and tonumber(ARGV[12])) or 0
-- A key's reservation '<keyId> <nano-USD>' returned to its key's 'held'.
local function releaseKeyHold(value)
  local id, amount = string.match(value, '^(%S+) (%d+)$')
  if id then redis.call('HINCRBY', KEYS[5], 'k:' .. id .. ':held', '-' .. amount) end
end
local m, h, d = math.floor(now / MINUTE), math.floor(now / HOUR), math.floor(now / DAY)

local f = redis.call('HMGET', KEYS[1], 'm', 'mc', 'h', 'hc', 'd', 'dc', 'tu')
local mc = (tonumber(f[1]) == m and tonumber(f[2])) or 0
local hc = (tonumber(f[3]) == h and tonumber(f[4])) or 0
local dc = (tonumber(f[5]) == d and tonumber(f[6])) or 0
local tu = (tonumber(f[5]) == d and tonumber(f[7])) or 0

-- Release reservations whose request died without settling (expiry reached): tokens, and the
-- spend held in this month's hash (one of an earlier month no longer matters to any limit).
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #expired > 0 then
  local freed, sfreed = 0, 0
  -- In chunks: unpack() of thousands of values would overflow Lua's stack.
  for i = 1, #expired, 500 do
    local fields = {}
    for j = i, math.min(i + 499, #expired) do fields[#fields + 1] = 'r:' .. expired[j] end
    local amounts = redis.call('HMGET', KEYS[3], unpack(fields))
    for j = 1, #amounts do freed = freed + (tonumber(amounts[j]) or 0) end
    redis.call('HDEL', KEYS[3], unpack(fields))
    local held = redis.call('HMGET', KEYS[5], unpack(fields))
    for j = 1, #held do sfreed = sfreed + (tonumber(held[j]) or 0) end
    if sfreed > 0 then redis.call('HDEL', KEYS[5], unpack(fields)) end
    for j = 1, #fields do fields[j] = 'k' .. fields[j] end
    local kheld = redis.call('HMGET', KEYS[5], unpack(fields))
    for j = 1, #kheld do
      if kheld[j] then releaseKeyHold(kheld[j]) end
    end
    redis.call('HDEL', KEYS[5], unpack(fields))
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('HINCRBY', KEYS[3], 'total', -freed)
  if sfreed > 0 then redis.call('HINCRBY', KEYS[5], 'held', int(-sfreed)) end
end
local reserved = tonumber(redis.call('HGET', KEYS[3], 'total')) or 0
local spendUsed = 0
if spendLimit then spendUsed = spent + (tonumber(redis.call('HGET', KEYS[5], 'held')) or 0) end

-- The key's own minute, counted beside the account's windows: the tier stays the ceiling.
local krpm = tonumber(ARGV[15])
local kmc = 0
if krpm then
  local k = redis.call('HMGET', KEYS[6], 'm', 'mc')
  kmc = (tonumber(k[1]) == m and tonumber(k[2])) or 0
end

-- Blocked on requests: wait until every exhausted window has rolled over.
local requestWait = 0
if mc >= rpm or (krpm and kmc >= krpm) then requestWait = math.max(requestWait, (m + 1) * MINUTE - now) end
if hc >= rph then requestWait = math.max(requestWait, (h + 1) * HOUR - now) end
if dc >= rpd then requestWait = math.max(requestWait, (d + 1) * DAY - now) end

-- Over the spending limit: nothing but settlements of requests in flight frees it before the
-- month ends, so it is the reason reported. HELD when the settled spend alone leaves room.
if spendLimit and spendUsed + sreserve > spendLimit then
  local first = 0
  local held = 0
  if spent + sreserve <= spendLimit then held = 1 end
  -- A request that alone costs more than the whole limit is too large, not a sign it was reached;
  -- one refused only while requests in flight hold the rest has not reached it either (yet).
  if held == 0 and sreserve <= spendLimit and redis.call('HSETNX', KEYS[5], 'stop', '1') == 1 then first = 1 end
  return { 0, 3, requestWait, now, mc, hc, dc, tu + reserved, spendUsed, first, held, kmc }
end

-- Over the key's own spending limit, within the account's: reason 4, HELD as above.
if keySpendLimit then
  local keyUsed = kspent + (tonumber(redis.call('HGET', KEYS[5], 'k:' .. keyId .. ':held')) or 0)
  if keyUsed + sreserve > keySpendLimit then
    local held = 0
    if kspent + sreserve <= keySpendLimit then held = 1 end
    return { 0, 4, requestWait, now, mc, hc, dc, tu + reserved, keyUsed, 0, held, kmc }
  end
end

-- Blocked on tokens: settled usage resets at UTC midnight. HELD when it alone leaves room.
local tokenWait, held = 0, 0
if tu + reserved + reserve > tpd then
  if tu + reserve <= tpd then held = 1 else tokenWait = (d + 1) * DAY - now end
end

if requestWait > 0 or tokenWait > 0 or held == 1 then
  -- A spent token quota outlasts a request window, so it is the reason worth reporting; tokens
  -- held by requests in flight free sooner than a spent request window does.
  local reason = 2
  if tokenWait == 0 and requestWait > 0 then reason = 1 end
  return { 0, reason, math.max(requestWait, tokenWait), now, mc, hc, dc, tu + reserved, spendUsed, 0, held, kmc }
end

mc, hc, dc = mc + 1, hc + 1, dc + 1
redis.call('HSET', KEYS[1], 'm', m, 'mc', mc, 'h', h, 'hc', hc, 'd', d, 'dc', dc, 'tu', tu)
redis.call('PEXPIRE', KEYS[1], (d + 1) * DAY - now + GRACE)
if krpm then
  kmc = kmc + 1
  redis.call('HSET', KEYS[6], 'm', m, 'mc', kmc)
  redis.call('PEXPIRE', KEYS[6], (m + 1) * MINUTE - now + GRACE)
end
-- A reservation's amounts exist only while its requestId is in the expiry set (both are written,
-- released and expired together), so only a requestId already there (admitted again) can have one.
local again = false
if reserve > 0 or sreserve > 0 then
  again = redis.call('ZADD', KEYS[2], now + ttl, requestId) == 0
  redis.call('PEXPIRE', KEYS[2], ttl + GRACE)
end
if reserve > 0 then
  -- Admitting the same requestId again replaces its reservation instead of holding two.
  local previous = again and tonumber(redis.call('HGET', KEYS[3], 'r:' .. requestId)) or 0
  redis.call('HSET', KEYS[3], 'r:' .. requestId, reserve)
  redis.call('HINCRBY', KEYS[3], 'total', reserve - previous)
  reserved = reserved + reserve - previous
  redis.call('PEXPIRE', KEYS[3], ttl + GRACE)
end
if sreserve > 0 then
  local previous = again and tonumber(redis.call('HGET', KEYS[5], 'r:' .. requestId)) or 0
  redis.call('HSET', KEYS[5], 'r:' .. requestId, ARGV[12])
  redis.call('HINCRBY', KEYS[5], 'held', int(sreserve - previous))
  spendUsed = spendUsed + sreserve - previous
  local kfield = 'kr:' .. requestId
  local kprevious = again and redis.call('HGET', KEYS[5], kfield)
  if kprevious then releaseKeyHold(kprevious) end
  if keySpendLimit then
    redis.call('HSET', KEYS[5], kfield, keyId .. ' ' .. ARGV[12])
    redis.call('HINCRBY', KEYS[5], 'k:' .. keyId .. ':held', ARGV[12])
  elseif kprevious then
    redis.call('HDEL', KEYS[5], kfield)
  end
end
return { 1, 0, 0, now, mc, hc, dc, tu + reserved, spendUsed, 0, 0, kmc }
`;

/**
 * Settlement: swap a request's reservation for the tokens it actually used, charged to the UTC
 * day on which it ends, and its spend reservation for what it actually cost, charged to the month
 * it was admitted in (the ledger's month for it). Idempotent: the first settle for a requestId
 * sets a marker; later ones change nothing. A reservation that already expired is simply gone;
 * the actual tokens still count. A month whose spend was never seeded is left unseeded: its
 * first admission with a limit reads the ledger, which has this request by then or soon after.
 * KEYS: counters hash, reservation expiries, reservation amounts, settled marker, the spend hash
 * of the request's month (any key of the account when ARGV[5] is '').
 * ARGV: now, requestId, actualTokens, markerTtlMs, actual cost in nano-USD ('' = no spend to settle),
 * the API key's id ('' = none: its own month, when seeded, gets the cost as the account's does).
 * Reply: 1 settled, 0 already settled.
 */
export const SETTLE_LUA = `${NOW}
local requestId, actual = ARGV[2], tonumber(ARGV[3])
if not redis.call('SET', KEYS[4], '1', 'NX', 'PX', ARGV[4]) then return 0 end
local held = tonumber(redis.call('HGET', KEYS[3], 'r:' .. requestId))
if held then
  redis.call('HDEL', KEYS[3], 'r:' .. requestId)
  redis.call('HINCRBY', KEYS[3], 'total', -held)
end
if ARGV[5] ~= '' then
  local sheld = redis.call('HGET', KEYS[5], 'r:' .. requestId)
  if sheld then
    redis.call('HDEL', KEYS[5], 'r:' .. requestId)
    redis.call('HINCRBY', KEYS[5], 'held', '-' .. sheld)
  end
  if ARGV[5] ~= '0' and redis.call('HEXISTS', KEYS[5], 'spent') == 1 then redis.call('HINCRBY', KEYS[5], 'spent', ARGV[5]) end
  local kheld = redis.call('HGET', KEYS[5], 'kr:' .. requestId)
  if kheld then
    redis.call('HDEL', KEYS[5], 'kr:' .. requestId)
    local id, amount = string.match(kheld, '^(%S+) (%d+)$')
    if id then redis.call('HINCRBY', KEYS[5], 'k:' .. id .. ':held', '-' .. amount) end
  end
  local kspent = 'k:' .. ARGV[6] .. ':spent'
  if ARGV[6] ~= '' and ARGV[5] ~= '0' and redis.call('HEXISTS', KEYS[5], kspent) == 1 then
    redis.call('HINCRBY', KEYS[5], kspent, ARGV[5])
  end
end
redis.call('ZREM', KEYS[2], requestId)
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

/**
 * One count in a fixed window aligned to the epoch (a UTC minute for a size of 60000): allowed
 * while fewer than the limit were counted in the current window. KEYS: the count's hash.
 * ARGV: now, limit, window size in ms. Reply: { allowed 0|1, count (including this one when
 * allowed), ms until the window rolls over }.
 */
export const WINDOW_COUNT_LUA = `${NOW}
local limit, size = tonumber(ARGV[2]), tonumber(ARGV[3])
local w = math.floor(now / size)
local f = redis.call('HMGET', KEYS[1], 'w', 'c')
local c = (tonumber(f[1]) == w and tonumber(f[2])) or 0
local reset = (w + 1) * size - now
if c >= limit then return { 0, c, reset } end
c = c + 1
redis.call('HSET', KEYS[1], 'w', w, 'c', c)
redis.call('PEXPIRE', KEYS[1], reset + GRACE)
return { 1, c, reset }
`;
