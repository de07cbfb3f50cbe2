-- configure.lua: creates or updates the configuration of one SKU shard.
--
-- The Redis twin of StockEngine.configure (durable-objects/engine/stock-engine.ts):
--   0. bad arguments ............................................ error reply, nothing written
--   1. an existing shard refuses total < held + sold ............ INVALID_STATE
--   2. every setting that is absent keeps its current value (or the default on creation:
--      name = sku, status = on_sale, perUserLimit = 1, holdSeconds = 900, no window bounds);
--      startsAt / endsAt = null clears the bound;
--   3. sku and shard are written on creation only (as the engine's upsert does); the seq is
--      1 on creation and + 1 on every update; held and sold are never touched.
-- Like the engine's configure, it runs no lazy expiry. It emits nothing.
--
-- KEYS: the same six for every Flashgate script (tools/lua.ts `shardKeys`); only KEYS[1] is used.
--   KEYS[1]  {fg:<sku>:<shard>}:sku       hash  sku shard shards name status per_user_limit hold_seconds
--                                               starts_at ends_at (absent = no bound) total held sold seq
--   KEYS[2..6]                                  unused here (holds, quota, nonces, payments, res: prefix)
--
-- ARGV:
--   ARGV[1]  settings       JSON of the engine's SkuSettings:
--                           {"sku","shard","shards","totalStock", optional "name","perUserLimit",
--                            "holdSeconds","status","startsAt","endsAt"}  (times in epoch ms)
--
-- Returns a JSON string (cjson) with the shape of the engine's Outcome<SkuState>:
--   {"ok":true,"value":{"sku","shard","shards","name","status","perUserLimit","holdSeconds",
--                       "startsAt","endsAt","stock":{"total","available","held","sold"},"seq"}}
--   {"ok":false,"code":"INVALID_STATE"}

local skuKey        = KEYS[1]              -- config and counters of the shard

local DEFAULTS      = { status = "on_sale", perUserLimit = 1, holdSeconds = 900 }

local function isInteger(n)
  return type(n) == "number" and n == math.floor(n) and n > -math.huge and n < math.huge
end

-- 0. Arguments. Checked before any write: an error reply mid-script would leave partial writes.
if #KEYS < 1 then return redis.error_reply("ERR configure.lua expects the sku key") end
local decoded, settings = pcall(cjson.decode, ARGV[1] or "")
if not decoded or type(settings) ~= "table" then
  return redis.error_reply("ERR configure.lua: settings must be a JSON object")
end

local function given(name)                 -- nil when the setting is absent (JSON null is cjson.null)
  return settings[name]
end

if type(given("sku")) ~= "string" or given("sku") == "" then
  return redis.error_reply("ERR configure.lua: sku is required")
end
if not isInteger(given("shard")) or given("shard") < 0 then
  return redis.error_reply("ERR configure.lua: shard must be an integer >= 0")
end
if not isInteger(given("shards")) or given("shards") < 1 then
  return redis.error_reply("ERR configure.lua: shards must be an integer >= 1")
end
if not isInteger(given("totalStock")) or given("totalStock") < 0 then
  return redis.error_reply("ERR configure.lua: totalStock must be an integer >= 0")
end
if given("name") ~= nil and type(given("name")) ~= "string" then
  return redis.error_reply("ERR configure.lua: name must be a string")
end
if given("status") ~= nil and given("status") ~= "on_sale" and given("status") ~= "paused" then
  return redis.error_reply("ERR configure.lua: status must be on_sale or paused")
end
for _, name in ipairs({ "perUserLimit", "holdSeconds" }) do
  if given(name) ~= nil and (not isInteger(given(name)) or given(name) < 1) then
    return redis.error_reply("ERR configure.lua: " .. name .. " must be an integer >= 1")
  end
end
for _, name in ipairs({ "startsAt", "endsAt" }) do
  if given(name) ~= nil and given(name) ~= cjson.null and not isInteger(given(name)) then
    return redis.error_reply("ERR configure.lua: " .. name .. " must be integer epoch ms or null")
  end
end

-- 1. Never below what is already held or sold ------------------------------------------------------

local current = redis.call("HMGET", skuKey,
  "sku", "name", "status", "per_user_limit", "hold_seconds", "starts_at", "ends_at", "held", "sold")
local exists        = current[1] ~= false
local held          = tonumber(current[8]) or 0
local sold          = tonumber(current[9]) or 0
if exists and given("totalStock") < held + sold then
  return cjson.encode({ ok = false, code = "INVALID_STATE" })
end

-- 2. Absent keeps, null clears ---------------------------------------------------------------------

-- `value` if given, else the current value (`prior`, false when absent from the hash), else `fallback`.
local function keep(value, prior, fallback)
  if value ~= nil then return value end
  if prior then return prior end
  return fallback
end

local name          = keep(given("name"), current[2], given("sku"))
local status        = keep(given("status"), current[3], DEFAULTS.status)
local perUserLimit  = tonumber(keep(given("perUserLimit"), current[4], DEFAULTS.perUserLimit))
local holdSeconds   = tonumber(keep(given("holdSeconds"), current[5], DEFAULTS.holdSeconds))
local startsAt      = keep(given("startsAt"), current[6], cjson.null)
local endsAt        = keep(given("endsAt"), current[7], cjson.null)

-- 3. Write -----------------------------------------------------------------------------------------

if not exists then
  redis.call("HSET", skuKey, "sku", given("sku"), "shard", given("shard"), "held", 0, "sold", 0, "seq", 0)
end
redis.call("HSET", skuKey,
  "shards", given("shards"),
  "name", name,
  "status", status,
  "per_user_limit", perUserLimit,
  "hold_seconds", holdSeconds,
  "total", given("totalStock"))
for field, value in pairs({ starts_at = startsAt, ends_at = endsAt }) do
  if value == cjson.null then
    redis.call("HDEL", skuKey, field)
  else
    redis.call("HSET", skuKey, field, value)
  end
end
redis.call("HINCRBY", skuKey, "seq", 1)

local row = redis.call("HMGET", skuKey, "sku", "shard", "shards", "total", "held", "sold", "seq",
  "starts_at", "ends_at")
local total = tonumber(row[4])
held = tonumber(row[5])
sold = tonumber(row[6])

return cjson.encode({
  ok = true,
  value = {
    sku          = row[1],
    shard        = tonumber(row[2]),
    shards       = tonumber(row[3]),
    name         = name,
    status       = status,
    perUserLimit = perUserLimit,
    holdSeconds  = holdSeconds,
    startsAt     = tonumber(row[8]) or cjson.null,
    endsAt       = tonumber(row[9]) or cjson.null,
    stock        = { total = total, available = total - held - sold, held = held, sold = sold },
    seq          = tonumber(row[7]),
    price        = cjson.null,             -- the Redis twin has no prices (see confirm.lua)
    currency     = "usd",
  },
})
