-- Tollgate fixed window, written once: every script that decides a fixed-window bucket
-- (fixed_window.lua, joint.lua) is built with this file (src/store/redis/scripts.rs concatenates
-- prelude.lua, the algorithm files a script needs, then its entry). The same function as
-- src/algorithm/fixed_window.rs, kept equal by tests/differential.rs. (st, now, limit,
-- unit, burst, mode, n) -> allowed, remaining, reset_us, write: st is a decoded state
-- (prelude.lua, read_state); allowed is 0|1; write is as put takes it (a denial writes
-- nothing). mode is 0 (consume n), 1 (peek), 2 (refund n) or 3 (overdraw n), checked by the caller; unit
-- >= 1.

-- The fixed window's decision in the window starting at ws, at an instant left µs before
-- its end, holding count; e is what the hash's p stores (0, or a calendar period's end);
-- at is the state's expiry (µs). A denial consumes nothing (src/algorithm/fixed_window.rs).
-- No closure is built per call.
local function fixed_in(ws, at, left, count, e, limit, mode, n)
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
      return 0, 0, left, {kind = 'w', s = ws, c = limit, p = e, at = ms_ceil(at)}
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
  return 1, math.max(limit - c, 0), left, {kind = 'w', s = ws, c = c, p = e, at = ms_ceil(at)}
end

-- Fixed window, epoch-aligned as envoyproxy/ratelimit. The hash's p is always 0.
local function fixed(st, now, limit, unit, burst, mode, n)
  local ws, left, count = window_at(st, now, unit, false)
  return fixed_in(ws, add(ws, unit), left, count, 0, limit, mode, n)
end

-- A fixed window over a calendar period [ps, pe) computed by the caller (README.md,
-- "Calendar periods"): called with unit = pe and burst = ps. A stored period that starts
-- later (and ends after its start) is the window instead; now is clamped into the window.
-- The hash's p is the window's end; the state expires CALENDAR_GRACE after it, and is no
-- state once that has passed (algorithm::fixed_window::CALENDAR_GRACE_US).
local CALENDAR_GRACE = 60000000
local function calendar(st, now, limit, pe, ps, mode, n)
  if st and (st.kind ~= 'w' or add(st.p, CALENDAR_GRACE) <= now) then st = nil end
  local ws, e = ps, math.max(pe, add(ps, 1))
  if st and st.s > ws and st.p > st.s then ws, e = st.s, st.p end
  now = math.min(math.max(now, ws), e - 1)
  local count = 0
  if st and st.s == ws then count = st.c end
  return fixed_in(ws, add(e, CALENDAR_GRACE), e - now, count, e, limit, mode, n)
end
