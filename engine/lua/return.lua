-- Return: KEYS[1] is the key's hash. ARGV: now (0: TIME), n, taken_at
-- (0: now), ttl ms, number of limits, then six numbers per limit. Replies
-- the time used.
local key = KEYS[1]
local now = clock(ARGV[1])
local n, taken, ttl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local ls = limits(tonumber(ARGV[5]), 5)
local sts, others, stale = load(key, ls, now)
local keep = others
for i, l in ipairs(ls) do
  local s = sts[i]
  -- A window of another length that lasts is left as it is: the tokens were
  -- not taken from it.
  s.kept = l.algo ~= 0 and s.win ~= nil and s.cur ~= nil and s.len ~= nil and s.len ~= l.win and lasting(s, now)
  keep = keep or s.kept
  if not s.kept then
    advance(l, s, now)
    local at = taken
    if at <= 0 then at = effective(l, s, now) end
    if l.algo == 0 then
      local capU = l.cap * l.tu
      s.tok = math.min(capU, s.tok + math.min(n, l.cap) * l.tu)
    else
      local tw = at - mod(at, l.win)
      if tw == s.win then
        s.cur = math.max(0, s.cur - n)
      elseif tw + l.win == s.win and l.algo == 1 then
        s.prev = math.max(0, s.prev - n)
      end
    end
  end
end
save(key, ls, sts, ttl, keep, stale)
return now
