-- Tollgate: the give-back of a plain window consume (src/store/redis/plain.rs) that was
-- denied, or that found its window stale and is decided again by its script. Standalone
-- (no prelude): EVALSHA <sha> 1 <key> <start> <n>. Takes n off the hash's count c only if
-- the hash is still in the window the consume saw: s equal to <start> ('' : the hash had
-- no s, and is then deleted, as the scripts read such a hash as no state). A window that
-- rolled or expired since is left alone: its count no longer holds that increment (or
-- holds it as another window's, a count too high until that window ends), and taking n
-- off another window would admit n too many. Never below 0. Reply: 1 given back, 0 not.
local s = redis.call('HGET', KEYS[1], 's')
if not s then
  if ARGV[1] == '' and redis.call('EXISTS', KEYS[1]) == 1 then
    redis.call('DEL', KEYS[1])
    return 1
  end
  return 0
end
if s ~= ARGV[1] then return 0 end
local c = redis.call('HINCRBY', KEYS[1], 'c', -tonumber(ARGV[2]))
if c < 0 then redis.call('HSET', KEYS[1], 'c', '0') end
return 1
