-- release.lua: gives held stock of one SKU shard back, by cancel or by expiry.
--
-- The Redis twin of StockEngine.cancel and StockEngine.expireDue (durable-objects/engine/stock-engine.ts).
-- The script reads no clock (`now` comes in ARGV) and emits no events (the outbox is the Durable
-- Object's job). A hold is released exactly once: released holds leave the holds zset, so a second
-- call finds nothing to do.
--
-- mode "cancel" (StockEngine.cancel), checks in this order:
--   0. bad arguments ............................................ error reply, nothing written
--   1. holds with expires_at <= now are released, oldest first, at most 64 (lazy expiry)
--   2. the reservation exists and belongs to userId ............. else RESERVATION_NOT_FOUND
--   3. already cancelled ........................................ ok, the reservation unchanged
--   4. status held .............................................. else INVALID_STATE (expired,
--                                                                 paid, refund_required)
--   5. released as "cancelled": held and the user's quota go down, seq up.
--
-- mode "expire" (StockEngine.expireDue, the alarm's sweep): releases as "expired" every hold with
-- expires_at <= now, oldest first (ties by id), at most `limit` of them when a limit is given.
--
-- KEYS: the same six for every Flashgate script (tools/lua.ts `shardKeys`). One hash tag per
-- shard, `{fg:<sku>:<shard>}`, so they all live in one cluster slot.
--   KEYS[1]  {fg:<sku>:<shard>}:sku       hash  sku shard shards name status per_user_limit hold_seconds
--                                               starts_at ends_at (absent = no bound) total held sold seq
--   KEYS[2]  {fg:<sku>:<shard>}:holds     zset  id of every live hold, scored by its expires_at
--   KEYS[3]  {fg:<sku>:<shard>}:quota     hash  userId -> active quantity (held + sold); 0 is deleted
--   KEYS[4]  {fg:<sku>:<shard>}:nonces    hash  purchase-token nonce -> reservation id (unused here)
--   KEYS[5]  {fg:<sku>:<shard>}:payments  hash  payment event id -> {"reservationId","outcome"} (unused here)
--   KEYS[6]  {fg:<sku>:<shard>}:res:      prefix of the reservation hashes `<prefix><id>`: id sku user_id
--                                               quantity status nonce created_at expires_at updated_at
--                                               (not a key itself; reservation keys share its hash tag)
--
-- ARGV:
--   ARGV[1]  mode           "cancel" | "expire"
--   ARGV[2]  now            epoch ms, integer
--   cancel:  ARGV[3] reservationId, ARGV[4] userId
--   expire:  ARGV[3] limit  optional integer >= 0; absent or "" releases every due hold
--
-- Returns a JSON string (cjson) with the shape of the engine's answers:
--   cancel:  Outcome<Reservation>
--            {"ok":true,"value":{"id","sku","userId","quantity","status","createdAt","expiresAt","updatedAt"}}
--            {"ok":false,"code":"RESERVATION_NOT_FOUND"} | {"ok":false,"code":"INVALID_STATE"}
--   expire:  {"ok":true,"value":<number of holds released>}   (expireDue's number, in an Outcome)

local skuKey        = KEYS[1]              -- config and counters of the shard
local holdsKey      = KEYS[2]              -- live holds by expiry
local quotaKey      = KEYS[3]              -- per-user active quantity
local resPrefix     = KEYS[6]              -- reservation hash = resPrefix .. id

local mode          = ARGV[1]              -- "cancel" | "expire"
local now           = tonumber(ARGV[2])    -- epoch ms, from the caller
local reservationId = ARGV[3]              -- cancel: the hold to cancel
local userId        = ARGV[4]              -- cancel: its owner (someone else's id is "not found")
local limit         = tonumber(ARGV[3])    -- expire: at most this many, nil = all due

local LAZY_EXPIRY   = 64                   -- overdue holds released per cancel; the sweep does the rest

local function isInteger(n)
  return n ~= nil and n == math.floor(n) and n > -math.huge and n < math.huge
end

-- 0. Arguments. Checked before any write: an error reply mid-script would leave partial writes.
if #KEYS ~= 6 then return redis.error_reply("ERR release.lua expects 6 keys") end
if not isInteger(now) then return redis.error_reply("ERR release.lua: now must be integer epoch ms") end
if mode == "cancel" then
  if reservationId == nil or reservationId == "" or userId == nil then
    return redis.error_reply("ERR release.lua: cancel needs reservationId and userId")
  end
elseif mode == "expire" then
  if ARGV[3] ~= nil and ARGV[3] ~= "" and (not isInteger(limit) or limit < 0) then
    return redis.error_reply("ERR release.lua: limit must be an integer >= 0")
  end
else
  return redis.error_reply("ERR release.lua: mode must be cancel or expire")
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
local function reject(code, available)
  return cjson.encode({ ok = false, code = code, available = available })
end

-- expire: the sweep --------------------------------------------------------------------------------

if mode == "expire" then
  return answer(expireDue(limit))
end

-- cancel: 1. lazy expiry ---------------------------------------------------------------------------

expireDue(LAZY_EXPIRY)

-- 2. The reservation, owned by userId -------------------------------------------------------------

local owner, status = unpack(redis.call("HMGET", resPrefix .. reservationId, "user_id", "status"))
if not owner or owner ~= userId then return reject("RESERVATION_NOT_FOUND") end

-- 3. Cancelling a cancelled reservation again changes nothing --------------------------------------

if status == "cancelled" then return answer(reservation(reservationId)) end

-- 4, 5. Only a hold can be cancelled ---------------------------------------------------------------

if status ~= "held" then return reject("INVALID_STATE") end
release(reservationId, "cancelled")
return answer(reservation(reservationId))
