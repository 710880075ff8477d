-- Tollgate: the call of a single-bucket script (gcra.lua, sliding_window.lua,
-- fixed_window.lua), written once; concatenated after prelude.lua, the algorithm's file and
-- algorithm/penalty.lua by src/store/redis/scripts.rs.

-- A single script's call (README.md, "Call"): EVALSHA <sha> 1 <key> <limit> <unit_us>
-- <burst> <mode> <n> [<now_us> [<penalty_us>]]. Reads KEYS[1] as algorithm algo ('g' GCRA,
-- 's' sliding, 'f' fixed window) stores it, decides with run (an algorithm/ function) and
-- the penalty (algorithm/penalty.lua), writes the decision, and returns the reply.
local function single(run, algo)
  local key = KEYS[1]
  local limit = int(ARGV[1])
  local unit = math.max(int(ARGV[2]), 1)
  local burst = int(ARGV[3])
  local mode = int(ARGV[4])
  local n = int(ARGV[5])
  local now = clock(ARGV[6])
  local penalty = int(ARGV[7])
  if mode > 3 then return redis.error_reply(BAD_MODE) end
  local kind = 'w'
  if algo == 'g' then kind = 'g' end
  local st = read_state(key, kind, now, unit, algo)
  local allowed, remaining, reset, write = charge(run, algo, st, now, limit, unit, burst, mode, n, penalty)
  put(key, write, false, st)
  return {allowed, remaining, reset}
end
