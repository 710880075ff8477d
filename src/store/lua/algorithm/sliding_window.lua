-- Tollgate sliding window, written once: every script that decides a sliding-window bucket
-- (sliding_window.lua, joint.lua) is built with this file (src/store/redis/scripts.rs
-- concatenates prelude.lua, the algorithm files a script needs, then its entry). The same
-- function as src/algorithm/sliding_window.rs, kept equal by tests/differential.rs. (st,
-- now, limit, unit, burst, mode, n) -> allowed, remaining, reset_us, write: st is a decoded
-- state (prelude.lua, read_state); allowed is 0|1; write is as put takes it (a denial
-- writes nothing). mode is 0 (consume n), 1 (peek), 2 (refund n) or 3 (overdraw n),
-- checked by the caller; unit >= 1.

-- Sliding window, two-epoch weighted counter (src/algorithm/sliding_window.rs). No closure
-- is built per call: the helpers take what they need as arguments.

-- Time until the estimate is 0 with no more charges, current count c.
local function sliding_until_full(c, previous, left, unit)
  if c > 0 then return add(left, unit) end
  if previous > 0 then return left end
  return 0
end

-- Exact time until k hits fit with no more charges; k does not fit now.
local function sliding_until_fits(k, limit, current, previous, left, unit)
  if k > limit then return add(left, unit) end
  if previous > 0 and current + k <= limit then
    local covered = muldiv(limit - current - k, unit, previous)
    if covered >= 1 then return math.max(left - covered, 0) end
  end
  if current == 0 then return left end
  local covered = muldiv(limit - k, unit, current)
  return add(left, math.max(unit - covered, 0))
end

local function sliding(st, now, limit, unit, burst, mode, n)
  local ws, left, current, previous = window_at(st, now, unit, true)
  -- ceil(previous * left / unit): comparing it plus integers with limit is the exact
  -- inequality previous * left + (current + n) * unit <= limit * unit. Sums of up to three
  -- values <= MAX compared with a value <= MAX: exact even when the sum itself is not
  -- representable (it then rounds to at least 2^53).
  local weighted, rest = muldiv(previous, left, unit)
  if rest > 0 then weighted = add(weighted, 1) end
  if mode == 1 then
    if weighted + current + 1 <= limit then
      return 1, math.max(limit - (weighted + current), 0), sliding_until_full(current, previous, left, unit)
    end
    local full = sliding_until_full(current, previous, left, unit)
    return 0, 0, math.max(full, sliding_until_fits(1, limit, current, previous, left, unit))
  end
  local c
  if mode == 0 then
    if weighted + current + n > limit then
      return 0, 0, sliding_until_fits(n, limit, current, previous, left, unit)
    end
    c = current + n
  elseif mode == 3 then
    -- Overdraw: recorded whether or not it fits, up to the limit (the debt ends with its
    -- window: a larger count would weigh on the next one); denied until one hit fits.
    if weighted + current + n > limit then
      local over = math.min(add(current, n), limit)
      local reset = sliding_until_fits(1, limit, over, previous, left, unit)
      -- Only a limit of 0 can leave nothing to store.
      if over == 0 and previous == 0 then return 0, 0, reset, false end
      return 0, 0, reset, {kind = 'w', s = ws, c = over, p = previous, at = window_expiry(ws, unit, true)}
    end
    c = current + n
  else
    c = math.max(current - n, 0)
  end
  -- Allowed, leaving c in the current window: store the window, or drop an empty one.
  local remaining, reset = math.max(limit - (weighted + c), 0), sliding_until_full(c, previous, left, unit)
  if c == 0 and previous == 0 then return 1, remaining, reset, false end
  return 1, remaining, reset, {kind = 'w', s = ws, c = c, p = previous, at = window_expiry(ws, unit, true)}
end
