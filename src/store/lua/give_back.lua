-- Tollgate: the give-back of a plain window consume (src/store/redis/plain.rs) that was
-- denied, or that found its bucket serving a penalty and is decided again by its script.
-- Standalone (no prelude): EVALSHA <sha> 1 <window key> <n>. The consume's increment is
-- in its window's own key (README.md, "Plain window commands"): takes n off it while the
-- key exists, never below 0, keeping its expiry. A key gone (its window ended, or a reset)
-- is left alone: a DECRBY would make a key of -n with no expiry, taking n off the next
-- consumes of that window. Reply: 1 given back, 0 not.
local c = redis.call('GET', KEYS[1])
if not c then return 0 end
if (tonumber(c) or 0) <= tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], '0', 'KEEPTTL')
else
  redis.call('DECRBY', KEYS[1], ARGV[1])
end
return 1
