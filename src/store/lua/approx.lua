-- Tollgate approximate mode: one tick's sync of many window buckets (see
-- src/store/approx/sync.rs). Adds each bucket's increments unconditionally (this instance
-- admitted them already) and answers every bucket's counts, so that the same call writes
-- and reads. The storage is the window scripts' (sliding_window.lua, fixed_window.lua):
-- a hash {s = window start µs, c = current count, p = previous count}, expiring two
-- windows after s (sliding) or at the window's end (fixed); exact and approximate modes
-- read each other's buckets.
--
-- KEYS: bucket keys. ARGV[1..5]: reserved (''); ARGV[6]: test clock ('' = the server's
-- TIME, see prelude.lua); then per bucket, from ARGV[7]: algorithm (1 sliding window,
-- 2 fixed window), unit µs, increment (a signed integer: a refund is negative; a count
-- never goes below 0).
-- Reply: {now µs, then per bucket: s, c, p}.

-- (prelude.lua, prepended at build time: MAX, int, add, mul, div, muldiv, clock, str,
-- ms_ceil)

local now = clock()
local out = {now}
for i = 1, #KEYS do
  local key = KEYS[i]
  local j = 7 + (i - 1) * 3
  local sliding = int(ARGV[j]) == 1
  local unit = math.max(int(ARGV[j + 1]), 1)
  local delta = tonumber(ARGV[j + 2]) or 0
  if delta ~= delta then delta = 0 end
  local stored = redis.call('HMGET', key, 's', 'c', 'p')
  local t = now
  if stored[1] then t = math.max(now, int(stored[1])) end
  local ws = div(t, unit) * unit
  local current, previous = 0, 0
  if stored[1] then
    local s = int(stored[1])
    if s == ws then
      current = int(stored[2])
      if sliding then previous = int(stored[3]) end
    elseif sliding and ws >= unit and s == ws - unit then
      previous = int(stored[2])
    end
  end
  if delta ~= 0 then
    if delta > 0 then
      current = add(current, int(delta))
    else
      current = math.max(current - int(-delta), 0)
    end
    -- The expiry follows from the window's start: a hash already of this window has it.
    local same = stored[1] and int(stored[1]) == ws
    if current == 0 and previous == 0 then
      redis.call('DEL', key)
    elseif same then
      redis.call('HSET', key, 'c', str(current))
    elseif sliding then
      redis.call('HSET', key, 's', str(ws), 'c', str(current), 'p', str(previous))
      redis.call('PEXPIREAT', key, str(ms_ceil(add(add(ws, unit), unit))))
    else
      redis.call('HSET', key, 's', str(ws), 'c', str(current), 'p', '0')
      redis.call('PEXPIREAT', key, str(ms_ceil(add(ws, unit))))
    end
  end
  out[#out + 1] = ws
  out[#out + 1] = current
  out[#out + 1] = previous
end
return out
