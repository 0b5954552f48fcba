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

-- Field names per algorithm (0 token bucket, 1 sliding, 2 fixed window). A
-- field's full name is the name, ':' and the identity of the limit it belongs
-- to (engine/identity.go): 'b' for a bucket or 'w' for a window, the length in
-- ms, and '#' and dup for the dup-th earlier limit of the same two. A window's
-- len is the length of the window win starts (absent from state stored before
-- it was recorded).
local FIELDS = {[0] = {'tok', 'ts'}, {'win', 'cur', 'len', 'prev'}, {'win', 'cur', 'len'}}
local OWN = {[0] = {tok = true, ts = true}, {win = true, cur = true, len = true, prev = true}, {win = true, cur = true, len = true}}

-- limits parses the limits from ARGV starting after index base: per limit
-- algorithm, requests, window, capacity, token units, rate.
local function limits(n, base)
  local ls, seen = {}, {}
  for i = 1, n do
    local b = base + (i - 1) * 6
    local algo, win = tonumber(ARGV[b + 1]), tonumber(ARGV[b + 3])
    local fam = 'w'
    if algo == 0 then fam = 'b' end
    local id = fam .. string.format('%d', win)
    local dup = seen[id] or 0
    seen[id] = dup + 1
    if dup > 0 then id = id .. '#' .. dup end
    ls[i] = {
      algo = algo, req = tonumber(ARGV[b + 2]), win = win,
      cap = tonumber(ARGV[b + 4]), tu = tonumber(ARGV[b + 5]), rate = tonumber(ARGV[b + 6]), fam = fam, id = id,
    }
  end
  return ls
end

-- parseid returns an identity's family, length and dup, or nil for a name
-- that is not one.
local function parseid(id)
  local fam, w, d = string.match(id, '^([bw])(%d+)#?(%d*)$')
  if not fam then return nil end
  if d == '' then d = '0' end
  return fam, tonumber(w), tonumber(d)
end

-- load reads the key's hash (HGETALL) and returns the state of each limit,
-- with the others flag: the hash holds state no limit takes (a policy's before
-- or after a reload, which its instances may still count in), or fields a
-- limit's algorithm does not own. A limit takes the state stored under its
-- identity; failing that, a state of its place as a hash stored before fields
-- named identities held it (legacy, which save then deletes); failing that, it
-- adopts the unused state of its family of the longest window (then the lowest
-- dup), the limits left taking their pick longest window first, then in their
-- order; failing that, fresh state. A state keeps the identity it was stored
-- under (s.id), under which save writes it back.
local function load(key, ls)
  local h = redis.call('HGETALL', key)
  local states, legacy, stale, others = {}, {}, {}, false
  for k = 1, #h, 2 do
    local f, v = h[k], tonumber(h[k + 1])
    local name, id = string.match(f, '^(%a+):(.+)$')
    if name then
      states[id] = states[id] or {}
      states[id][name] = v
    else
      local lname, at = string.match(f, '^(%a+)(%d+)$')
      if lname then
        legacy[at] = legacy[at] or {}
        legacy[at][lname] = v
        stale[#stale + 1] = f
      else
        others = true
      end
    end
  end
  local sts, used = {}, {}
  for i, l in ipairs(ls) do
    if states[l.id] then
      sts[i], used[l.id] = states[l.id], true
      sts[i].id = l.id
    end
  end
  for i, l in ipairs(ls) do
    local lg = legacy[tostring(i - 1)]
    if not sts[i] and lg and ((l.algo == 0 and (lg.tok or lg.ts)) or (l.algo ~= 0 and (lg.win or lg.cur))) then
      local s = {id = l.id, legacy = true}
      for name in pairs(OWN[l.algo]) do s[name] = lg[name] end
      sts[i] = s
    end
  end
  while true do
    local i = nil
    for k, l in ipairs(ls) do
      if not sts[k] and (i == nil or l.win > ls[i].win) then i = k end
    end
    if i == nil then break end
    local best, bw, bd = nil, nil, nil
    for id in pairs(states) do
      local fam, w, d = parseid(id)
      if not used[id] and fam == ls[i].fam and (best == nil or w > bw or (w == bw and d < bd)) then
        best, bw, bd = id, w, d
      end
    end
    if best then
      sts[i], used[best] = states[best], true
      sts[i].id = best
    else
      sts[i] = {id = ls[i].id}
    end
  end
  for id in pairs(states) do
    if not used[id] then others = true end
  end
  for i, l in ipairs(ls) do
    for name in pairs(sts[i]) do
      if name ~= 'id' and name ~= 'legacy' and not OWN[l.algo][name] then others = true end
    end
  end
  return sts, others, stale
end

-- save writes back the fields each limit's algorithm owns, under its state's
-- identity, but for a state marked kept (a window of another length that a
-- return leaves as it is); deletes the fields of a legacy hash, unless a kept
-- state came from them; and renews the TTL; with keep (a foreign or kept
-- window, or state the limits do not own: a policy's before or after a reload,
-- which its instances may still count in) it does not shorten it.
local function save(key, ls, sts, ttl, keep, stale)
  local args, k, keptLegacy = {}, 0, false
  for i, l in ipairs(ls) do
    local s = sts[i]
    local v = {s.win, s.cur, s.len, s.prev}
    if l.algo == 0 then v = {s.tok, s.ts} end
    if s.kept then
      keptLegacy = keptLegacy or s.legacy
    else
      for j, f in ipairs(FIELDS[l.algo]) do
        args[k + 1], args[k + 2] = f .. ':' .. s.id, string.format('%d', v[j])
        k = k + 2
      end
    end
  end
  if k > 0 then redis.call('HSET', key, unpack(args)) end
  if #stale > 0 and not keptLegacy then redis.call('HDEL', key, unpack(stale)) end
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
