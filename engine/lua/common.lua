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
-- ms, and '#' and dup when alike limits (the same family and length) rank
-- before it by requests, capacity and place. A window's len is the length of
-- the window win starts (absent from state stored before it was recorded).
local FIELDS = {[0] = {'tok', 'ts'}, {'win', 'cur', 'len', 'prev'}, {'win', 'cur', 'len'}}
local OWN = {[0] = {tok = true, ts = true}, {win = true, cur = true, len = true, prev = true}, {win = true, cur = true, len = true}}
local NAMES = {tok = true, ts = true, win = true, cur = true, len = true, prev = true}
local ALL = {'tok', 'ts', 'win', 'cur', 'len', 'prev'}

-- limits parses the limits from ARGV starting after index base: per limit
-- algorithm, requests, window, capacity, token units, rate.
local function limits(n, base)
  local ls = {}
  for i = 1, n do
    local b = base + (i - 1) * 6
    local algo = tonumber(ARGV[b + 1])
    local fam = 'w'
    if algo == 0 then fam = 'b' end
    ls[i] = {
      algo = algo, req = tonumber(ARGV[b + 2]), win = tonumber(ARGV[b + 3]),
      cap = tonumber(ARGV[b + 4]), tu = tonumber(ARGV[b + 5]), rate = tonumber(ARGV[b + 6]), fam = fam,
    }
  end
  for i, l in ipairs(ls) do
    local dup = 0
    for j, o in ipairs(ls) do
      if j ~= i and o.fam == l.fam and o.win == l.win and (o.req < l.req or (o.req == l.req and (o.cap < l.cap or (o.cap == l.cap and j < i)))) then
        dup = dup + 1
      end
    end
    l.id = l.fam .. string.format('%d', l.win)
    if dup > 0 then l.id = l.id .. '#' .. dup end
  end
  return ls
end

-- parseid returns an identity's family, length and dup, or nil for a name
-- that is not one.
local function parseid(id)
  local fam, w, d = string.match(id, '^([bw])(%d+)#?(%d*)$')
  if not fam or d == '0' then return nil end
  if d == '' then d = '0' end
  return fam, tonumber(w), tonumber(d)
end

-- PLACED is how long, in ms, a hash of the old layout (below) is read and
-- written by place after this version first met it, before it moves to the
-- new one: long enough for a fleet to finish a rolling upgrade.
local PLACED = 3600000

-- load reads the key's hash (HGETALL) and returns the state of each limit,
-- with the others flag: the hash holds state no limit takes (a policy's before
-- or after a reload, which its instances may still count in), or fields a
-- limit's algorithm does not own, or fields of no known name; and the names of
-- fields save deletes. A limit takes the state stored under its identity;
-- failing that, it adopts the unused state of its family of the longest window
-- (then the lowest dup), the limits left taking their pick longest window
-- first, then in their order, and save moves it under its own identity;
-- failing that, fresh state.
--
-- A hash holding a whole state named the old way (tok0 and ts0, or win1 and
-- cur1: a limit's place in the list) was written by the version before
-- identities, or by an instance of it during an upgrade. It is read and
-- written by place, as that version does, so that both versions count in the
-- same fields, for PLACED ms after this version first met it (the field
-- placed holds when). Then its states move under identities: a window's by
-- the length it records, a bucket's as the bucket limit of its place, else
-- dropped; they take part in the matching above as any state, and the old
-- fields go. A lone field named the old way (a stray write) is one of the
-- others.
local function load(key, ls, now)
  local h = redis.call('HGETALL', key)
  local states, legacy, others, placed = {}, {}, false, nil
  for k = 1, #h, 2 do
    local f, v = h[k], tonumber(h[k + 1])
    local name, id = string.match(f, '^(%a+):(.+)$')
    local lname, at = string.match(f, '^(%a+)(%d+)$')
    if name and NAMES[name] and parseid(id) then
      states[id] = states[id] or {raw = {}}
      states[id][name], states[id].raw[name] = v, h[k + 1]
    elseif lname and NAMES[lname] then
      at = tonumber(at)
      legacy[at] = legacy[at] or {raw = {}, names = {}}
      legacy[at][lname], legacy[at].raw[lname] = v, h[k + 1]
      legacy[at].names[#legacy[at].names + 1] = f
    elseif f == 'placed' and v then
      placed = v
    else
      others = true
    end
  end
  local whole = false
  for _, fs in pairs(legacy) do
    if (fs.tok and fs.ts) or (fs.win and fs.cur) then whole = true end
  end
  local sts, stale = {}, {}
  if whole and (placed == nil or now - placed < PLACED) then
    for at, fs in pairs(legacy) do
      local l = ls[at + 1]
      for name in pairs(fs) do
        if NAMES[name] and (not l or not OWN[l.algo][name]) then others = true end
      end
    end
    if next(states) then others = true end
    for i, l in ipairs(ls) do
      local s, fs = {at = i - 1}, legacy[i - 1] or {}
      for name in pairs(OWN[l.algo]) do s[name] = fs[name] end
      sts[i] = s
    end
    if placed == nil then sts.placed = now end
    return sts, others, stale
  end
  if whole then
    -- The move. A place may hold a bucket's state and a window's (an old policy changed
    -- its family there): each moves on its own. A state named by its place's limit goes
    -- first, then those named by their recorded length. A moved state, the newest writes,
    -- replaces the state of its name, whose other fields go.
    local moved, ats = {}, {}
    for at in pairs(legacy) do ats[#ats + 1] = at end
    table.sort(ats)
    for pass = 1, 2 do
      for _, at in ipairs(ats) do
        local fs = legacy[at]
        do
          local l = ls[at + 1]
          for _, fam in ipairs({'w', 'b'}) do
            local id, names = nil, {'tok', 'ts'}
            if fam == 'w' and fs.win and fs.cur then
              names = {'win', 'cur', 'len', 'prev'}
              if l and l.algo ~= 0 and (fs.len == nil or fs.len == l.win) then
                if pass == 1 then id = l.id end
              elseif pass == 2 and fs.len then
                id = 'w' .. string.format('%d', fs.len)
              end
            elseif fam == 'b' and fs.tok and fs.ts and l and l.algo == 0 and pass == 1 then
              id = l.id
            end
            if id and moved[id] and fam == 'w' then
              -- Two old windows of one length come to one name (an old policy had two):
              -- the newer window, and of one window the larger counts, so that no count
              -- is lost.
              local st = states[id]
              if fs.win > st.win then
                for _, name in ipairs(names) do st[name], st.raw[name] = fs[name], fs.raw[name] end
              elseif fs.win == st.win then
                for _, name in ipairs({'cur', 'prev'}) do
                  if fs[name] ~= nil and (st[name] == nil or fs[name] > st[name]) then
                    st[name], st.raw[name] = fs[name], fs.raw[name]
                  end
                end
              end
            elseif id and not moved[id] then
              local st = {raw = {}, moved = true}
              for _, name in ipairs(names) do
                if fs[name] ~= nil then st[name], st.raw[name] = fs[name], fs.raw[name] end
              end
              if states[id] then
                for name in pairs(states[id]) do
                  if NAMES[name] and st[name] == nil then stale[#stale + 1] = name .. ':' .. id end
                end
              end
              states[id], moved[id] = st, true
            end
          end
          if pass == 2 then
            for _, f in ipairs(fs.names) do stale[#stale + 1] = f end
          end
        end
      end
    end
    if placed then stale[#stale + 1] = 'placed' end
  elseif next(legacy) then
    others = true
  end
  local used = {}
  for i, l in ipairs(ls) do
    if states[l.id] then
      sts[i], used[l.id] = states[l.id], true
      sts[i].id = l.id
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
      sts[i].id, sts[i].moved = ls[i].id, true
      for name in pairs(states[best]) do
        if NAMES[name] then stale[#stale + 1] = name .. ':' .. best end
      end
    else
      sts[i] = {id = ls[i].id}
    end
  end
  for id, st in pairs(states) do
    if not used[id] then
      others = true
      if st.moved then
        sts.orphans = sts.orphans or {}
        sts.orphans[id] = st
      end
    end
  end
  for i, l in ipairs(ls) do
    for name in pairs(sts[i]) do
      if NAMES[name] and not OWN[l.algo][name] then others = true end
    end
  end
  return sts, others, stale
end

-- save writes back the fields each limit's algorithm owns, under its state's
-- identity (by place in a hash of the old layout), but for a state marked kept
-- (a window of another length that a return leaves as it is); a state it
-- adopted moves whole, every field it holds, under its new identity, and the
-- fields of its old one are deleted; and renews the TTL; with keep (a foreign or kept window, or state the
-- limits do not own: a policy's before or after a reload, which its instances
-- may still count in) it does not shorten it.
local function save(key, ls, sts, ttl, keep, stale)
  local args, k = {}, 0
  for i, l in ipairs(ls) do
    local s = sts[i]
    local sfx = ':' .. tostring(s.id)
    if s.at then sfx = tostring(s.at) end
    local names = FIELDS[l.algo]
    if s.moved then names = ALL end
    if not s.kept or s.moved then
      for _, f in ipairs(names) do
        if s[f] ~= nil then
          -- A moved state's fields its algorithm does not own, and all of a kept one's, go
          -- as they were stored, digit for digit.
          local v = string.format('%d', s[f])
          if s.moved and (s.kept or not OWN[l.algo][f]) then v = s.raw[f] end
          args[k + 1], args[k + 2] = f .. sfx, v
          k = k + 2
        end
      end
    end
  end
  if sts.placed then
    args[k + 1], args[k + 2] = 'placed', string.format('%d', sts.placed)
    k = k + 2
  end
  -- Old states moved under an identity no limit of the call has: written as they were.
  for id, st in pairs(sts.orphans or {}) do
    for _, f in ipairs(ALL) do
      if st.raw[f] ~= nil then
        args[k + 1], args[k + 2] = f .. ':' .. id, st.raw[f]
        k = k + 2
      end
    end
  end
  if k > 0 then redis.call('HSET', key, unpack(args)) end
  if #stale > 0 then
    -- What this call wrote stays: a moved state's name may be one that went stale.
    local written, del = {}, {}
    for j = 1, k, 2 do written[args[j]] = true end
    for _, f in ipairs(stale) do
      if not written[f] then del[#del + 1] = f end
    end
    if #del > 0 then redis.call('HDEL', key, unpack(del)) end
  end
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
