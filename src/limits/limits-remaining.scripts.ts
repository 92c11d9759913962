import { NOW } from './limiter.scripts.js';

/**
 * What is left of an account's windows now, read without counting or reserving anything (the
 * admission script's reads, none of its writes). KEYS: counters hash, reservation expiries,
 * reservation amounts (the admission's first three). ARGV: now ('' = Redis's TIME).
 * Reply: { minuteCount, hourCount, dayCount, tokensUsed (settled today + live reservations),
 *          minuteResetMs, hourResetMs, dayResetMs (epoch ms of each window's end) }.
 */
export const REMAINING_LUA = `${NOW}
local m, h, d = math.floor(now / MINUTE), math.floor(now / HOUR), math.floor(now / DAY)
local f = redis.call('HMGET', KEYS[1], 'm', 'mc', 'h', 'hc', 'd', 'dc', 'tu')
local mc = (tonumber(f[1]) == m and tonumber(f[2])) or 0
local hc = (tonumber(f[3]) == h and tonumber(f[4])) or 0
local dc = (tonumber(f[5]) == d and tonumber(f[6])) or 0
local tu = (tonumber(f[5]) == d and tonumber(f[7])) or 0
local reserved = tonumber(redis.call('HGET', KEYS[3], 'total')) or 0
-- A reservation past its expiry holds nothing: the next admission frees it, so it is not counted.
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
for i = 1, #expired, 500 do
  local fields = {}
  for j = i, math.min(i + 499, #expired) do fields[#fields + 1] = 'r:' .. expired[j] end
  local amounts = redis.call('HMGET', KEYS[3], unpack(fields))
  for j = 1, #amounts do reserved = reserved - (tonumber(amounts[j]) or 0) end
end
return { mc, hc, dc, tu + math.max(reserved, 0), int((m + 1) * MINUTE), int((h + 1) * HOUR), int((d + 1) * DAY) }
`;
