-- reserve.lua: holds `quantity` units of one SKU shard for one user, once per purchase-token nonce.
--
-- The Redis twin of StockEngine.reserve (durable-objects/engine/stock-engine.ts) for ONE request: the same
-- checks in the same order, the same answer codes, the same counters. The script reads no clock
-- (`now` comes in ARGV) and emits no events (the outbox is the Durable Object's job).
--
--   0. bad arguments ............................................ error reply, nothing written
--   1. holds with expires_at <= now are released, oldest first, at most 64 (lazy expiry)
--   2. the SKU hash exists ...................................... else SKU_NOT_FOUND
--   3. a used nonce replays its reservation (replayed = true) ... different user or quantity:
--                                                                 IDEMPOTENCY_MISMATCH
--   4. status == on_sale and startsAt <= now < endsAt ........... else SALE_NOT_ACTIVE (+ the sale)
--   5. user's active (held + sold) + quantity <= perUserLimit ... else LIMIT_EXCEEDED (+ the limit
--                                                                 and the user's active)
--   6. available > 0 ............................................ else SOLD_OUT (available 0)
--   7. available >= quantity .................................... else INSUFFICIENT_STOCK
--   8. the hold is written: reservation hash, holds zset, held, the user's quota, nonce, seq.
-- A rejected request writes nothing beyond step 1 (the engine commits its lazy expiry too).
--
-- KEYS: the same six for every Flashgate script (tools/lua.ts `shardKeys`). One hash tag per
-- shard, `{fg:<sku>:<shard>}`, so they all live in one cluster slot.
--   KEYS[1]  {fg:<sku>:<shard>}:sku       hash  sku shard shards name status per_user_limit hold_seconds
--                                               starts_at ends_at (absent = no bound) total held sold seq
--   KEYS[2]  {fg:<sku>:<shard>}:holds     zset  id of every live hold, scored by its expires_at
--   KEYS[3]  {fg:<sku>:<shard>}:quota     hash  userId -> active quantity (held + sold); 0 is deleted
--   KEYS[4]  {fg:<sku>:<shard>}:nonces    hash  purchase-token nonce -> reservation id
--   KEYS[5]  {fg:<sku>:<shard>}:payments  hash  payment event id -> {"reservationId","outcome"} (unused here)
--   KEYS[6]  {fg:<sku>:<shard>}:res:      prefix of the reservation hashes `<prefix><id>`: id sku user_id
--                                               quantity status nonce created_at expires_at updated_at
--                                               (not a key itself; reservation keys share its hash tag)
--
-- ARGV:
--   ARGV[1]  now            epoch ms, integer
--   ARGV[2]  reservationId  id for a new hold, made by the caller (the engine's `<sku>.<shard>.<uuid hex>`)
--   ARGV[3]  userId
--   ARGV[4]  nonce          the purchase token's nonce
--   ARGV[5]  quantity       integer >= 1
--
-- Returns a JSON string (cjson) with the shape of the engine's Outcome<ReserveAnswer>:
--   {"ok":true,"value":{"reservation":{"id","sku","userId","quantity","status","createdAt",
--                                      "expiresAt","updatedAt"},"replayed":false,"available":7}}
--   {"ok":false,"code":"SOLD_OUT","available":0}
--   {"ok":false,"code":"SKU_NOT_FOUND"}                            (the only code without available)

local skuKey        = KEYS[1]              -- config and counters of the shard
local holdsKey      = KEYS[2]              -- live holds by expiry
local quotaKey      = KEYS[3]              -- per-user active quantity
local noncesKey     = KEYS[4]              -- nonce -> reservation id
local resPrefix     = KEYS[6]              -- reservation hash = resPrefix .. id

local now           = tonumber(ARGV[1])    -- epoch ms, from the caller
local newId         = ARGV[2]              -- id of the hold this request may create
local userId        = ARGV[3]              -- the shopper
local nonce         = ARGV[4]              -- one reservation per nonce
local quantity      = tonumber(ARGV[5])    -- units asked for

local LAZY_EXPIRY   = 64                   -- overdue holds released per call; the caller's sweep does the rest

local function isInteger(n)
  return n ~= nil and n == math.floor(n) and n > -math.huge and n < math.huge
end

-- 0. Arguments. Checked before any write: an error reply mid-script would leave partial writes.
if #KEYS ~= 6 then return redis.error_reply("ERR reserve.lua expects 6 keys") end
if not isInteger(now) then return redis.error_reply("ERR reserve.lua: now must be integer epoch ms") end
if not isInteger(quantity) or quantity < 1 then
  return redis.error_reply("ERR reserve.lua: quantity must be an integer >= 1")
end
if newId == nil or newId == "" or userId == nil or userId == "" or nonce == nil or nonce == "" then
  return redis.error_reply("ERR reserve.lua: reservationId, userId and nonce are required")
end
if redis.call("EXISTS", resPrefix .. newId) == 1 then
  return redis.error_reply("ERR reserve.lua: reservation id already exists")
end

-- Shared helpers (identical in reserve.lua, release.lua and confirm.lua) --------------------------

local function reservation(id)
  local r = redis.call("HMGET", resPrefix .. id,
    "id", "sku", "user_id", "quantity", "status", "created_at", "expires_at", "updated_at")
  return {
    id        = r[1],
    sku       = r[2],
    userId    = r[3],
    quantity  = tonumber(r[4]),
    status    = r[5],
    createdAt = tonumber(r[6]),
    expiresAt = tonumber(r[7]),
    updatedAt = tonumber(r[8]),
  }
end

-- Moves a reservation to `status`; bumps the shard's seq where the engine writes an outbox event.
local function setStatus(id, status)
  redis.call("HSET", resPrefix .. id, "status", status, "updated_at", now)
  redis.call("HINCRBY", skuKey, "seq", 1)
end

local function addQuota(user, delta)
  if redis.call("HINCRBY", quotaKey, user, delta) <= 0 then redis.call("HDEL", quotaKey, user) end
end

-- Gives a hold's units back: the one place stock returns to available (invariant 5).
local function release(id, status)
  local r = redis.call("HMGET", resPrefix .. id, "user_id", "quantity")
  local held = tonumber(r[2])
  redis.call("HINCRBY", skuKey, "held", -held)
  addQuota(r[1], -held)
  redis.call("ZREM", holdsKey, id)
  setStatus(id, status)
end

-- Releases holds due at `now` as "expired", oldest first; limit nil = all. Returns how many.
local function expireDue(limit)
  local due
  if limit then
    due = redis.call("ZRANGEBYSCORE", holdsKey, "-inf", now, "LIMIT", 0, limit)
  else
    due = redis.call("ZRANGEBYSCORE", holdsKey, "-inf", now)
  end
  for _, id in ipairs(due) do release(id, "expired") end
  return #due
end

local function answer(value) return cjson.encode({ ok = true, value = value }) end
-- `figures`: what a refusal was decided by (the limit and the holding, the sale), as the engine says it.
local function reject(code, available, figures)
  local answer = { ok = false, code = code, available = available }
  for key, value in pairs(figures or {}) do answer[key] = value end
  return cjson.encode(answer)
end

-- 1. Lazy expiry -----------------------------------------------------------------------------------

expireDue(LAZY_EXPIRY)

-- 2. The SKU ---------------------------------------------------------------------------------------

local sku = redis.call("HMGET", skuKey,
  "sku", "shard", "status", "per_user_limit", "hold_seconds", "starts_at", "ends_at", "total", "held", "sold")
if not sku[1] then return reject("SKU_NOT_FOUND") end

local skuName       = sku[1]
local status        = sku[3]
local perUserLimit  = tonumber(sku[4])
local holdSeconds   = tonumber(sku[5])
local startsAt      = tonumber(sku[6])     -- nil when the sale has no start bound
local endsAt        = tonumber(sku[7])     -- nil when the sale has no end bound
local available     = tonumber(sku[8]) - tonumber(sku[9]) - tonumber(sku[10])

-- 3. Nonce replay ----------------------------------------------------------------------------------

local priorId = redis.call("HGET", noncesKey, nonce)
if priorId and redis.call("EXISTS", resPrefix .. priorId) == 1 then
  local prior = reservation(priorId)
  if prior.quantity ~= quantity or prior.userId ~= userId then
    return reject("IDEMPOTENCY_MISMATCH", available)
  end
  return answer({ reservation = prior, replayed = true, available = available })
end

-- 4. Sale window -----------------------------------------------------------------------------------

local onSale = status == "on_sale"
  and (startsAt == nil or now >= startsAt)
  and (endsAt == nil or now < endsAt)
if not onSale then
  local sale = { status = status, startsAt = startsAt or cjson.null, endsAt = endsAt or cjson.null }
  return reject("SALE_NOT_ACTIVE", available, { sale = sale })
end

-- 5. Per-user limit over held + sold ---------------------------------------------------------------

local active = tonumber(redis.call("HGET", quotaKey, userId)) or 0
if active + quantity > perUserLimit then
  return reject("LIMIT_EXCEEDED", available, { limit = { perUserLimit = perUserLimit, held = active } })
end

-- 6, 7. Stock --------------------------------------------------------------------------------------

if available == 0 then return reject("SOLD_OUT", 0) end
if available < quantity then return reject("INSUFFICIENT_STOCK", available) end

-- 8. The hold --------------------------------------------------------------------------------------

local expiresAt = now + holdSeconds * 1000
redis.call("HSET", resPrefix .. newId,
  "id", newId,
  "sku", skuName,
  "user_id", userId,
  "quantity", quantity,
  "status", "held",
  "nonce", nonce,
  "created_at", now,
  "expires_at", expiresAt,
  "updated_at", now)
redis.call("ZADD", holdsKey, expiresAt, newId)
redis.call("HINCRBY", skuKey, "held", quantity)
redis.call("HINCRBY", skuKey, "seq", 1)
addQuota(userId, quantity)
redis.call("HSET", noncesKey, nonce, newId)

return answer({ reservation = reservation(newId), replayed = false, available = available - quantity })
