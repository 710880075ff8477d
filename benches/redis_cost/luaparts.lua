-- Per-operation costs of the prelude's helpers in plain Lua 5.1 (redis.call stubbed).
-- Usage: lua5.1 benches/redis_cost/luaparts.lua src/store/lua (Debian package lua5.1).
local dir = arg[1]
local function read(f) local h = assert(io.open(dir .. '/' .. f)); local s = h:read('*a'); h:close(); return s end
local store = {}
redis = { call = function(cmd, key, v) if cmd == 'TIME' then return {'1795670700', '123456'} end
  if cmd == 'GET' then return store[key] end if cmd == 'SET' then store[key] = v end return 1 end }
local P = read('prelude.lua')
local G = read('algorithm/gcra.lua')
local f = assert(loadstring(P .. G .. '\nreturn {int=int, add=add, div=div, muldiv=muldiv, clock=clock, str=str, ms_ceil=ms_ceil, read_state=read_state, put=put, gcra=gcra}'))()
local N = 1000000
local function time(name, fn)
  local t0 = os.clock()
  for i = 1, N do fn(i) end
  print(string.format('%-34s %8.3f us', name, (os.clock() - t0) * 1e6 / N))
end
time('loop only', function(i) end)
time('int("60000000")', function(i) return f.int('60000000') end)
time('div(1795670700123456, 1000)', function(i) return f.div(1795670700123456, 1000) end)
time('muldiv(1, 60000000, 100)', function(i) return f.muldiv(1, 60000000, 100) end)
time('muldiv(100, 60000000, 100)', function(i) return f.muldiv(100, 60000000, 100) end)
time('clock()', function(i) return f.clock(nil) end)
time('str(1795670700123456)', function(i) return f.str(1795670700123456) end)
time('tostring-free concat of str', function(i) return f.str(1795670700123456) .. ':' .. f.str(17) end)
time('ms_ceil(1795670700123456)', function(i) return f.ms_ceil(1795670700123456) end)
store.k = '1795670700600000:3'
time('read_state(k, g)', function(i) return f.read_state('k', 'g') end)
local st = f.read_state('k', 'g')
time('gcra(st, now, ...) consume', function(i) return f.gcra(st, 1795670700123456, 100, 60000000, 100, 0, 1) end)
time('gcra(nil, now, ...) consume', function(i) return f.gcra(nil, 1795670700123456, 100, 60000000, 100, 0, 1) end)
local w = {state = {kind = 'g', t = 1795670700723456, r = 3}, at = 1795670700724}
time('put(k, write)', function(i) return f.put('k', w, false) end)
time('string.match tat:rem', function(i) return string.match('1795670700600000:3', '^(%d+):(%d+)$') end)
time('table {1, x, y}', function(i) return {1, i, i} end)
time('closure creation x8', function(i) local a = function() return i end local b = function() return i end local c = function() return i end local d = function() return i end local e = function() return i end local g = function() return i end local h = function() return i end local j = function() return i end return a end)
