-- Tollgate fixed window, written once: every script that decides a fixed-window bucket
-- (fixed_window.lua, joint.lua) is built with this file (src/store/redis/scripts.rs concatenates
-- prelude.lua, the algorithm files a script needs, then its entry). The same function as
-- src/algorithm/fixed_window.rs, kept equal by tests/differential.rs. (st, now, limit,
-- unit, burst, mode, n) -> allowed, remaining, reset_us, write: st is a decoded state
-- (prelude.lua, read_state); allowed is 0|1; write is as put takes it (a denial writes
-- nothing). mode is 0 (consume n), 1 (peek), 2 (refund n) or 3 (overdraw n), checked by the caller; unit
-- >= 1.

-- Fixed window, epoch-aligned as envoyproxy/ratelimit, but a denial consumes nothing
-- (src/algorithm/fixed_window.rs). The hash's p is always 0. No closure is built per call.
local function fixed(st, now, limit, unit, burst, mode, n)
  local ws, left, count = window_at(st, now, unit, false)
  local c
  if mode == 0 then
    if count + n > limit then return 0, 0, left end
    c = count + n
  elseif mode == 3 then
    -- Overdraw: recorded whether or not it fits, up to the limit (the window spent to its
    -- end, where the debt ends); denied past the limit.
    c = add(count, n)
    if c > limit then
      if limit == 0 then return 0, 0, left, false end
      return 0, 0, left, {kind = 'w', s = ws, c = limit, p = 0, at = window_expiry(ws, unit, false)}
    end
  elseif mode == 1 then
    if count >= limit then return 0, 0, left end
    local reset = 0
    if count > 0 then reset = left end
    return 1, math.max(limit - count, 0), reset
  else
    c = math.max(count - n, 0)
  end
  -- Allowed, leaving c in the window: store it, or drop an empty window.
  if c == 0 then return 1, limit, 0, false end
  return 1, math.max(limit - c, 0), left, {kind = 'w', s = ws, c = c, p = 0, at = window_expiry(ws, unit, false)}
end
