-- mirror.lua: writes a stock snapshot of one SKU shard into the Redis mirror, only if it is newer
-- (a publish) or only if the hash is still what the writer read (reconciliation's repair).
--
-- The stock object (durable-objects/stock/sku-stock.ts) is the truth; this hash is its mirror, read by stock
-- displays and never used to decide a sale (docs/ARCHITECTURE.md, invariant 7). Snapshots can arrive late or twice
-- (a publish that timed out may still land after a newer one, a restarted object republishes), so a
-- publish keeps the snapshot with the highest seq and ignores anything not newer. A repair must be able
-- to write a lower seq (a mirror ahead of a reset object), but never over a snapshot published after
-- the repair read the hash: it names the seq it read, and is refused if the hash holds another.
--
--   0. bad arguments ............................................ error reply, nothing written
--   1. ARGV[7] "newer": the stored seq is >= ARGV[1] ............ nothing written, {0, stored seq}
--      ARGV[7] "=<n>": the stored seq is not n ................... nothing written, {0, stored seq}
--      ARGV[7] "absent": the hash has a seq ...................... nothing written, {0, stored seq}
--   2. otherwise every field is written at once (a repair: the ... {1, new seq}
--      hash is emptied first, in the same script)
--
-- The stored seq of a reply is -1 when the hash has none.
--
-- KEYS:
--   KEYS[1]  {fg:<sku>:<shard>}:mirror    hash  version (the seq: a stored name) total available held sold
--                                               status, then the extra
--                                               fields the caller passes (name, shards, per_user_limit,
--                                               hold_seconds, starts_at, ends_at, published_at; "" = none)
--
-- ARGV:
--   ARGV[1]  seq            integer >= 0, the stock object's seq (grows with every change)
--   ARGV[2]  total          integer >= 0
--   ARGV[3]  available      integer >= 0
--   ARGV[4]  held           integer >= 0
--   ARGV[5]  sold           integer >= 0     (available + held + sold must equal total)
--   ARGV[6]  status         "on_sale" | "paused" | "archived"
--   ARGV[7]  write if       "newer" (a publish), "=<seq>" or "absent" (a repair: the hash as it was read)
--   ARGV[8..] field, value  extra fields of the snapshot, in pairs
--
-- Returns an array: { applied (1 or 0), the seq the mirror holds after the call }.

local mirrorKey     = KEYS[1]

local function integer(text)
  local n = tonumber(text)
  if n == nil or n ~= math.floor(n) or n < 0 or n >= 2 ^ 53 then return nil end
  return n
end

-- 0. Arguments. Checked before any write: an error reply mid-script would leave partial writes.
if #KEYS ~= 1 then return redis.error_reply("ERR mirror.lua expects 1 key") end
if #ARGV < 7 or #ARGV % 2 ~= 1 then
  return redis.error_reply("ERR mirror.lua: seq total available held sold status guard, then field/value pairs")
end
local seq           = integer(ARGV[1])
local total         = integer(ARGV[2])
local available     = integer(ARGV[3])
local held          = integer(ARGV[4])
local sold          = integer(ARGV[5])
local status        = ARGV[6]
local guard         = ARGV[7]
if not (seq and total and available and held and sold) then
  return redis.error_reply("ERR mirror.lua: seq and counts must be integers >= 0")
end
if available + held + sold ~= total then
  return redis.error_reply("ERR mirror.lua: available + held + sold must equal total")
end
if status ~= "on_sale" and status ~= "paused" and status ~= "archived" then
  return redis.error_reply("ERR mirror.lua: status must be on_sale, paused or archived")
end
local readSeq = nil
if guard ~= "newer" and guard ~= "absent" then
  readSeq = string.sub(guard, 1, 1) == "=" and integer(string.sub(guard, 2)) or nil
  if readSeq == nil then return redis.error_reply("ERR mirror.lua: guard must be newer, absent or =<seq>") end
end
local reserved = { version = true, total = true, available = true, held = true, sold = true, status = true }
for i = 8, #ARGV, 2 do
  if ARGV[i] == "" or reserved[ARGV[i]] then
    return redis.error_reply("ERR mirror.lua: bad extra field name '" .. ARGV[i] .. "'")
  end
end

-- 1. Newer only, or unchanged since it was read -----------------------------------------------------

local stored = tonumber(redis.call("HGET", mirrorKey, "version"))
if guard == "newer" then
  if stored and stored >= seq then return { 0, stored } end
elseif guard == "absent" then
  if stored then return { 0, stored } end
elseif stored ~= readSeq then
  return { 0, stored or -1 }
end

-- 2. Write the whole snapshot ----------------------------------------------------------------------

local fields = {
  "version", seq, "total", total, "available", available, "held", held, "sold", sold, "status", status,
}
for i = 8, #ARGV do fields[#fields + 1] = ARGV[i] end
-- A repair rewrites the hash whole: no field of the snapshot it replaces is left behind.
if guard ~= "newer" then redis.call("DEL", mirrorKey) end
redis.call("HSET", mirrorKey, unpack(fields))
return { 1, seq }
