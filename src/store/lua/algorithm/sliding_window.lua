-- Tollgate sliding window, written once: every script that decides a sliding-window bucket
-- (sliding_window.lua, joint.lua) is built with this file (src/store/redis/scripts.rs
-- concatenates prelude.lua, the algorithm files a script needs, then its entry). The same
-- function as src/algorithm/sliding_window.rs, kept equal by tests/differential.rs. (st,
-- now, limit, unit, burst, mode, n) -> reply, write: st is a decoded state (prelude.lua,
-- read_state); reply is {allowed 0|1, remaining, reset_us}; write is as put takes it (a
-- denial writes nothing). mode is 0 (consume n), 1 (peek) or 2 (refund n), checked by the
-- caller; unit >= 1.

-- Sliding window, two-epoch weighted counter (src/algorithm/sliding_window.rs).
local function sliding(st, now, limit, unit, burst, mode, n)
  local ws, left, current, previous = window_at(st, now, unit, true)
  -- ceil(previous * left / unit): comparing it plus integers with limit is the exact
  -- inequality previous * left + (current + n) * unit <= limit * unit.
  local weighted, rest = muldiv(previous, left, unit)
  if rest > 0 then weighted = add(weighted, 1) end
  -- Sums of up to three values <= MAX compared with a value <= MAX: exact even when the
  -- sum itself is not representable (it then rounds to at least 2^53).
  local function fits(k) return weighted + current + k <= limit end
  local function remaining(c) return math.max(limit - (weighted + c), 0) end
  -- Time until the estimate is 0 with no more charges, current count c.
  local function until_full(c)
    if c > 0 then return add(left, unit) end
    if previous > 0 then return left end
    return 0
  end
  -- Exact time until k hits fit with no more charges; k does not fit now.
  local function until_fits(k)
    if k > limit then return add(left, unit) end
    if previous > 0 and current + k <= limit then
      local covered = muldiv(limit - current - k, unit, previous)
      if covered >= 1 then return math.max(left - covered, 0) end
    end
    if current == 0 then return left end
    local covered = muldiv(limit - k, unit, current)
    return add(left, math.max(unit - covered, 0))
  end
  -- Allowed, leaving c in the current window: store the window, or drop an empty one.
  local function charge(c)
    local reply = {1, remaining(c), until_full(c)}
    if c == 0 and previous == 0 then return reply, false end
    local state = {kind = 'w', s = ws, c = c, p = previous}
    return reply, {state = state, at = window_expiry(ws, unit, true)}
  end
  if mode == 0 then
    if fits(n) then return charge(current + n) end
    return {0, 0, until_fits(n)}
  elseif mode == 1 then
    if fits(1) then return {1, remaining(current), until_full(current)} end
    return {0, 0, math.max(until_full(current), until_fits(1))}
  end
  return charge(math.max(current - n, 0))
end
