-- Shared arithmetic of take.lua and return.lua: a line-for-line port of
-- engine/algorithm.go. Numbers are doubles; every value stays an integer
-- below 2^53 (engine.Limit.Validate), and division is corrected so that
-- it is exact floor division.
local MAXEXACT = 9007199254740991
local NEVER = -1

local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceildiv(a, b)
  return idiv(a + b - 1, b)
end

local function mod(a, b)
  return a - idiv(a, b) * b
end

local function clamp(v, lo, hi)
  if v < lo then return lo end
  if v > hi then return hi end
  return v
end

-- now returns the request's time, or Redis's own clock when it is 0 or less.
local function clock(arg)
  local now = tonumber(arg)
  if now > 0 then return now end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + idiv(tonumber(t[2]), 1000)
end

-- Field names per algorithm (0 token bucket, 1 sliding, 2 fixed window);
-- limit i owns the names suffixed with i - 1. A window's len is the length of
-- the window win starts (absent from state stored before it was recorded).
local FIELDS = {[0] = {'tok', 'ts'}, {'win', 'cur', 'len', 'prev'}, {'win', 'cur', 'len'}}

-- limits parses the limits from ARGV starting after index base: per limit
-- algorithm, requests, window, capacity, token units, rate.
local function limits(n, base)
  local ls = {}
  for i = 1, n do
    local b = base + (i - 1) * 6
    local algo, sfx, f = tonumber(ARGV[b + 1]), tostring(i - 1), {}
    for j, name in ipairs(FIELDS[algo]) do f[j] = name .. sfx end
    ls[i] = {
      algo = algo, req = tonumber(ARGV[b + 2]), win = tonumber(ARGV[b + 3]),
      cap = tonumber(ARGV[b + 4]), tu = tonumber(ARGV[b + 5]), rate = tonumber(ARGV[b + 6]), f = f,
    }
  end
  return ls
end

-- MARKERS are, per algorithm, fields that only other algorithms write: the
-- whole set a limit's algorithm writes is there once it has written (a
-- window's win, cur and len, a sliding window's prev, a bucket's tok and ts),
-- so one of each other set tells that it is there.
local MARKERS = {[0] = {'win'}, {'tok'}, {'tok', 'prev'}}

-- load reads the fields every limit's algorithm owns with one HMGET; a
-- missing field is nil. The same HMGET reads markers of state the limits do
-- not own (see others): another algorithm's fields at a limit's index, or a
-- limit's beyond theirs (every call writes its limits from the first, so the
-- next index tells).
local function load(key, ls)
  local fields = {}
  for _, l in ipairs(ls) do
    for _, f in ipairs(l.f) do fields[#fields + 1] = f end
  end
  local own = #fields
  for i, l in ipairs(ls) do
    for _, f in ipairs(MARKERS[l.algo]) do fields[#fields + 1] = f .. tostring(i - 1) end
  end
  fields[#fields + 1] = 'tok' .. tostring(#ls)
  fields[#fields + 1] = 'win' .. tostring(#ls)
  local vals = redis.call('HMGET', key, unpack(fields))
  local sts, k = {}, 0
  for i, l in ipairs(ls) do
    local v = {}
    for j = 1, #l.f do
      k = k + 1
      if vals[k] then v[j] = tonumber(vals[k]) end
    end
    if l.algo == 0 then
      sts[i] = {tok = v[1], ts = v[2]}
    else
      sts[i] = {win = v[1], cur = v[2], len = v[3], prev = v[4]}
    end
  end
  local others = false
  for j = own + 1, #fields do
    if vals[j] then others = true end
  end
  return sts, others
end

-- save writes back the fields each limit's algorithm owns, but for a state
-- marked kept (a window of another length that a return leaves as it is), and
-- renews the TTL; with keep (a foreign or kept window, or state the limits do
-- not own: a policy's before or after a reload, which its instances may still
-- count in) it does not shorten it.
local function save(key, ls, sts, ttl, keep)
  local args, k = {}, 0
  for i, l in ipairs(ls) do
    local s = sts[i]
    local v = {s.win, s.cur, s.len, s.prev}
    if l.algo == 0 then v = {s.tok, s.ts} end
    if not s.kept then
      for j, f in ipairs(l.f) do
        args[k + 1], args[k + 2] = f, string.format('%d', v[j])
        k = k + 2
      end
    end
  end
  if k > 0 then redis.call('HSET', key, unpack(args)) end
  if keep then
    local left = redis.call('PTTL', key)
    if left > ttl then ttl = left end
  end
  redis.call('PEXPIRE', key, ttl)
end

-- lasting says whether now falls in the window s holds, of the length it
-- records.
local function lasting(s, now)
  return now < clamp(s.win, 0, MAXEXACT) + clamp(s.len, 0, MAXEXACT)
end

-- foreign says whether advanced state s is a window of another length than
-- l's, which lasts: l decides against it as it stands and counts in it.
local function foreign(l, s)
  return l.algo ~= 0 and s.len ~= nil and s.len ~= l.win
end

local function advance(l, s, now)
  if l.algo == 0 then
    local capU = l.cap * l.tu
    if s.tok == nil or s.ts == nil then
      s.tok, s.ts = capU, now
      return
    end
    s.tok = clamp(s.tok, 0, capU)
    s.ts = clamp(s.ts, 0, MAXEXACT)
    if now <= s.ts then return end
    local elapsed = math.min(now - s.ts, ceildiv(capU, l.rate))
    s.tok = math.min(capU, s.tok + elapsed * l.rate)
    s.ts = now
    return
  end
  local sliding = l.algo == 1
  local start = now - mod(now, l.win)
  if s.win == nil or s.cur == nil then
    s.win, s.cur, s.len = start, 0, l.win
    if sliding then s.prev = 0 end
    return
  end
  if sliding and s.prev == nil then s.prev = 0 end
  s.cur = clamp(s.cur, 0, MAXEXACT)
  s.win = clamp(s.win, 0, MAXEXACT)
  if sliding then s.prev = clamp(s.prev, 0, MAXEXACT) end
  if s.len ~= nil and s.len ~= l.win then
    s.len = clamp(s.len, 0, MAXEXACT)
    if lasting(s, now) then return end
    local last = math.max(s.win + s.len - 1, 0)
    s.win = last - mod(last, l.win)
  end
  s.len = l.win
  if now < s.win then
    now = s.win
    start = now - mod(now, l.win)
  end
  if start == s.win then
    return
  elseif start == s.win + l.win and sliding then
    s.prev, s.cur, s.win = s.cur, 0, start
  else
    s.cur, s.win = 0, start
    if sliding then s.prev = 0 end
  end
end

local function effective(l, s, now)
  if l.algo == 0 then return s.ts end
  return math.max(now, s.win)
end

local function available(l, s, now)
  if l.algo == 0 then return idiv(s.tok, l.tu) end
  if l.algo == 1 then
    if foreign(l, s) then return math.max(0, l.req - s.cur - math.min(s.prev, l.req)) end
    local w = ceildiv(math.min(s.prev, l.req) * (l.win - (now - s.win)), l.win)
    return math.max(0, l.req - s.cur - w)
  end
  return math.max(0, l.req - s.cur)
end
