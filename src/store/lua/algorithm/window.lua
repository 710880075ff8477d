-- Tollgate's window arithmetic, written once: what the sliding and fixed windows
-- (algorithm/sliding_window.lua, algorithm/fixed_window.lua) and approximate mode's sync
-- (approx.lua) share. Concatenated after prelude.lua by src/store/redis/scripts.rs.

-- The window a stored window state is in at now, rolled forward: (ws = its start, left =
-- µs to its end, current, previous). The count carries over only within the same window
-- and, for a sliding window, into the next one as its previous count. A start in the
-- future (a clock that stepped back) is read as now = start. Also approx.lua's.
local function window_at(st, now, unit, sliding)
  if st and st.kind ~= 'w' then st = nil end
  if st then now = math.max(now, st.s) end
  local elapsed = now - div(now, unit) * unit
  local ws = now - elapsed
  local current, previous = 0, 0
  if st then
    if st.s == ws then
      current = st.c
      if sliding then previous = st.p end
    elseif sliding and ws >= unit and st.s == ws - unit then
      previous = st.c
    end
  end
  return ws, unit - elapsed, current, previous
end

-- When a window starting at ws expires, in ms: two windows on (sliding: it is the next
-- one's previous count), else at its end.
local function window_expiry(ws, unit, sliding)
  if sliding then return ms_ceil(add(add(ws, unit), unit)) end
  return ms_ceil(add(ws, unit))
end
