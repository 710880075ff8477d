-- Tollgate approximate mode: one call of the sync (or a first read) over many window
-- buckets (see src/store/approx/sync.rs). Adds each bucket's increments unconditionally
-- (this instance admitted them already) to the window they were admitted in, and answers
-- every bucket's counts, so that the same call writes and reads. The storage is the window
-- scripts' (sliding_window.lua, fixed_window.lua): a hash {s = window start µs, c = current
-- count, p = previous count}, expiring two windows after s (sliding) or at the window's
-- end (fixed); exact and approximate modes read each other's buckets.
--
-- KEYS: bucket keys. ARGV[1]: 'w' to add the buckets' window keys (plain window commands,
-- prelude.lua's fold; '' not: an approximate domain's buckets have none unless it was
-- exact, with plain consumes, before a reload). ARGV[2..5]: reserved (''); ARGV[6]: test clock ('' = the server's
-- TIME, see prelude.lua); then per bucket, from ARGV[7], five arguments: algorithm
-- (1 sliding window, 2 fixed window), unit µs, start (µs) of the window the increment was
-- admitted in, increment, and the increment of the window before that one (signed
-- integers: a refund is negative; a count never goes below 0). An increment of a window
-- that is neither the current one nor (sliding) the previous one no longer counts and is
-- dropped; a start after the current window (the instance's clock ahead of this server's)
-- is read as the current window. All increments 0: a read.
-- Reply: {now µs, then per bucket: s, c, p}.

-- The window math (window_at, window_expiry, algorithm/window.lua) and the hash with its
-- window keys (read_state, put, prelude.lua) are the window scripts' own.

-- A signed integer with |x| <= MAX from an argument (garbage -> 0).
local function signed(v)
  local x = tonumber(v)
  if x == nil or x ~= x then return 0 end
  if x < 0 then return -int(-x) end
  return int(x)
end

-- count + delta, never below 0 nor above MAX.
local function moved(count, delta)
  if delta >= 0 then return add(count, delta) end
  return math.max(count + delta, 0)
end

local now = clock(ARGV[6])
local out = {now}
for i = 1, #KEYS do
  local key = KEYS[i]
  local j = 7 + (i - 1) * 5
  local sliding = int(ARGV[j]) == 1
  local unit = math.max(int(ARGV[j + 1]), 1)
  local start = int(ARGV[j + 2])
  local delta = signed(ARGV[j + 3])
  local carry = signed(ARGV[j + 4])
  local code = nil
  if ARGV[1] == 'w' then
    code = 'f'
    if sliding then code = 's' end
  end
  local st = read_state(key, 'w', now, unit, code)
  local ws, _, current, previous = window_at(st, now, unit, sliding)
  -- Which of the increments land in the current and the previous window.
  if start > ws then start = ws end
  local dc, dp = 0, 0
  if start == ws then
    dc, dp = delta, carry
  elseif start + unit == ws then
    dp = delta
  end
  if not sliding then dp = 0 end
  if dc ~= 0 or dp ~= 0 then
    current = moved(current, dc)
    previous = moved(previous, dp)
    -- The expiry follows from the window's start: a hash already of this window has it.
    local same = st and st.s == ws
    if st and st.w then
      -- Window keys hold part of the counts (plain window commands): put writes the
      -- hash's share.
      local write = false
      if current > 0 or previous > 0 then
        write = {kind = 'w', s = ws, c = current, p = previous, u = st.u, at = window_expiry(ws, unit, sliding)}
      end
      put(key, write, false, st)
    elseif current == 0 and previous == 0 then
      redis.call('DEL', key)
    elseif same and dp == 0 then
      redis.call('HSET', key, 'c', str(current))
    elseif same then
      redis.call('HSET', key, 'c', str(current), 'p', str(previous))
    else
      put(key, {kind = 'w', s = ws, c = current, p = previous, at = window_expiry(ws, unit, sliding)}, false)
    end
  end
  out[#out + 1] = ws
  out[#out + 1] = current
  out[#out + 1] = previous
end
return out
