-- Tollgate: this build of the scripts does not read window keys (prelude.lua, fold):
-- --redis-windows lua. Put first, before prelude.lua, by src/store/redis/scripts/sources.rs.
local WINDOW_KEYS = false
