-- Take: KEYS[1] is the key's hash. ARGV: now (0: TIME), want, min, ttl ms,
-- number of limits, then six numbers per limit (see limits). Replies
-- {granted, remaining, retry_after, reset_after, limiting, now}.
local key = KEYS[1]
local now = clock(ARGV[1])
local want, need, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ls = limits(tonumber(ARGV[5]), 5)
local sts, others, stale = load(key, ls, now)

local function retry_after(l, s, now, n)
  if n > l.cap then return NEVER end
  if available(l, s, now) >= n then return 0 end
  if foreign(l, s) then return math.min(s.win + s.len, MAXEXACT) - now end
  if l.algo == 0 then return ceildiv(n * l.tu - s.tok, l.rate) end
  local e = now - s.win
  if l.algo == 1 then
    local m = l.req - s.cur - n
    if m >= 0 then return l.win - idiv(m * l.win, math.min(s.prev, l.req)) - e end
    local wait = l.win - e
    if s.cur > 0 then wait = wait + math.max(0, l.win - idiv((l.req - n) * l.win, math.min(s.cur, l.req))) end
    return wait
  end
  return l.win - e
end

local function reset_after(l, s, now)
  if l.algo == 0 then return ceildiv(l.cap * l.tu - s.tok, l.rate) end
  if foreign(l, s) then return math.min(s.win + s.len, MAXEXACT) - now end
  return l.win - (now - s.win)
end

local granted, keep = want, others
for i, l in ipairs(ls) do
  advance(l, sts[i], now)
  keep = keep or foreign(l, sts[i])
  granted = math.min(granted, available(l, sts[i], effective(l, sts[i], now)))
end
local retry = 0
if granted < need then
  granted = 0
  for i, l in ipairs(ls) do
    local r = retry_after(l, sts[i], effective(l, sts[i], now), need)
    if r == NEVER or retry == NEVER then
      retry = NEVER
    else
      retry = math.max(retry, r)
    end
  end
end
local remaining, limiting = -1, 1
for i, l in ipairs(ls) do
  local s = sts[i]
  if granted > 0 then
    if l.algo == 0 then s.tok = s.tok - granted * l.tu else s.cur = s.cur + granted end
  end
  local a = available(l, s, effective(l, s, now))
  if remaining < 0 or a < remaining then remaining, limiting = a, i end
end
local ll, ls_ = ls[limiting], sts[limiting]
local reset = reset_after(ll, ls_, effective(ll, ls_, now))
save(key, ls, sts, ttl, keep, stale)
return {granted, remaining, retry, reset, limiting - 1, now}
