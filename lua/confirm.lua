-- confirm.lua: applies one payment event to a reservation of one SKU shard, once per event id.
--
-- The Redis twin of StockEngine.applyPayment (durable-objects/engine/stock-engine.ts). The script reads
-- no clock (`now` comes in ARGV) and emits no events (the outbox is the Durable Object's job).
--
--   0. bad arguments ............................................ error reply, nothing written
--   1. holds with expires_at <= now are released, oldest first, at most 64 (lazy expiry)
--   2. the event id was applied to another reservation or type .. IDEMPOTENCY_MISMATCH (one event
--                                                                 id is one event), nothing written
--   3. the reservation exists ................................... else RESERVATION_NOT_FOUND
--      the event id was applied before .......................... ok, the reservation as it is
--                                                                 now, the status and outcome
--                                                                 recorded for the event,
--                                                                 replayed = true
--   4. payment.failed:    held -> "cancelled" (stock released); any other status stays
--      payment.succeeded: held -> "paid" (held -> sold; the user's quota is unchanged)
--                         expired | cancelled -> "paid" when available >= quantity and the user's
--                           active + quantity <= perUserLimit (sold and quota go up),
--                           else "refund_required" (outcome refund_required, reason "too_late"
--                           when the units are not there, else "limit_exceeded")
--                         paid | refund_required -> unchanged, outcome refund_required, reason
--                           "already_paid" (a reservation is never paid twice)
--      outcome "applied" (reason null) unless said otherwise; a refund_required outcome is counted
--      in the sku hash's `payments_refund_required`.
--   5. the event id is recorded with its reservation and type, the resulting status, the outcome and
--      its reason, whatever happened in 4
--      (the same answer on every replay of the event).
--
-- (The engine also checks a payment's amount and currency against the SKU's price; the Redis
-- twin has no prices, like a SKU without one, whose payments the engine does not check either.)
--
-- KEYS: the same six for every Flashgate script (tools/lua.ts `shardKeys`). One hash tag per
-- shard, `{fg:<sku>:<shard>}`, so they all live in one cluster slot.
--   KEYS[1]  {fg:<sku>:<shard>}:sku       hash  sku shard shards name status per_user_limit hold_seconds
--                                               starts_at ends_at (absent = no bound) total held sold seq
--   KEYS[2]  {fg:<sku>:<shard>}:holds     zset  id of every live hold, scored by its expires_at
--   KEYS[3]  {fg:<sku>:<shard>}:quota     hash  userId -> active quantity (held + sold); 0 is deleted
--   KEYS[4]  {fg:<sku>:<shard>}:nonces    hash  purchase-token nonce -> reservation id (unused here)
--   KEYS[5]  {fg:<sku>:<shard>}:payments  hash  payment event id -> {"reservationId","type","status","outcome","reason"}
--   KEYS[6]  {fg:<sku>:<shard>}:res:      prefix of the reservation hashes `<prefix><id>`: id sku user_id
--                                               quantity status nonce created_at expires_at updated_at
--                                               (not a key itself; reservation keys share its hash tag)
--
-- ARGV:
--   ARGV[1]  now            epoch ms, integer
--   ARGV[2]  eventId        the payment provider's event id (the idempotency key)
--   ARGV[3]  type           "payment.succeeded" | "payment.failed"
--   ARGV[4]  reservationId
--
-- Returns a JSON string (cjson) with the shape of the engine's Outcome<PaymentAnswer>:
--   {"ok":true,"value":{"reservation":{"id","sku","userId","quantity","status","createdAt",
--                                      "expiresAt","updatedAt"},"status":"paid","outcome":"applied",
--                                      "reason":null,"replayed":false}}
--   {"ok":false,"code":"RESERVATION_NOT_FOUND"} | {"ok":false,"code":"IDEMPOTENCY_MISMATCH"}

local skuKey        = KEYS[1]              -- config and counters of the shard
local holdsKey      = KEYS[2]              -- live holds by expiry
local quotaKey      = KEYS[3]              -- per-user active quantity
local paymentsKey   = KEYS[5]              -- payment event ids already applied
local resPrefix     = KEYS[6]              -- reservation hash = resPrefix .. id

local now           = tonumber(ARGV[1])    -- epoch ms, from the caller
local eventId       = ARGV[2]              -- applied once
local paymentType   = ARGV[3]              -- "payment.succeeded" | "payment.failed"
local reservationId = ARGV[4]              -- the reservation paid for

local LAZY_EXPIRY   = 64                   -- overdue holds released per call; the caller's sweep does the rest

local function isInteger(n)
  return n ~= nil and n == math.floor(n) and n > -math.huge and n < math.huge
end

-- 0. Arguments. Checked before any write: an error reply mid-script would leave partial writes.
if #KEYS ~= 6 then return redis.error_reply("ERR confirm.lua expects 6 keys") end
if not isInteger(now) then return redis.error_reply("ERR confirm.lua: now must be integer epoch ms") end
if paymentType ~= "payment.succeeded" and paymentType ~= "payment.failed" then
  return redis.error_reply("ERR confirm.lua: type must be payment.succeeded or payment.failed")
end
if eventId == nil or eventId == "" or reservationId == nil or reservationId == "" then
  return redis.error_reply("ERR confirm.lua: eventId and reservationId are required")
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

-- 1. Lazy expiry -----------------------------------------------------------------------------------

expireDue(LAZY_EXPIRY)

-- 2. One event id is one event (records from before the type was kept compare by reservation) ------

local seen = redis.call("HGET", paymentsKey, eventId)
local recorded = seen and cjson.decode(seen)
if recorded and (recorded.reservationId ~= reservationId or (recorded.type and recorded.type ~= paymentType)) then
  return reject("IDEMPOTENCY_MISMATCH")
end

-- 3. The reservation, and an event already applied -------------------------------------------------

local resKey = resPrefix .. reservationId
local owner, quantity, status = unpack(redis.call("HMGET", resKey, "user_id", "quantity", "status"))
if not owner then return reject("RESERVATION_NOT_FOUND") end
quantity = tonumber(quantity)

if recorded then
  return answer({
    reservation = reservation(reservationId), status = recorded.status, outcome = recorded.outcome,
    reason = recorded.reason or cjson.null, replayed = true,
  })
end

-- 4. The payment -----------------------------------------------------------------------------------

local outcome = "applied"
local reason = cjson.null                  -- why a payment is refund_required
if paymentType == "payment.failed" then
  if status == "held" then release(reservationId, "cancelled") end
elseif status == "held" then
  redis.call("HINCRBY", skuKey, "held", -quantity)
  redis.call("HINCRBY", skuKey, "sold", quantity)
  redis.call("ZREM", holdsKey, reservationId)
  setStatus(reservationId, "paid")
elseif status == "expired" or status == "cancelled" then
  -- Late payment: re-take the stock if it is there and the user stays within the limit.
  local sku          = redis.call("HMGET", skuKey, "total", "held", "sold", "per_user_limit")
  local available    = tonumber(sku[1]) - tonumber(sku[2]) - tonumber(sku[3])
  local active       = tonumber(redis.call("HGET", quotaKey, owner)) or 0
  if available >= quantity and active + quantity <= tonumber(sku[4]) then
    redis.call("HINCRBY", skuKey, "sold", quantity)
    addQuota(owner, quantity)
    setStatus(reservationId, "paid")
  else
    setStatus(reservationId, "refund_required")
    outcome = "refund_required"
    if available >= quantity then reason = "limit_exceeded" else reason = "too_late" end
  end
else
  outcome = "refund_required"              -- paid already, or refunded already: never paid twice
  reason = "already_paid"
end
if outcome == "refund_required" then redis.call("HINCRBY", skuKey, "payments_refund_required", 1) end

-- 5. Record the event with the outcome -------------------------------------------------------------

local result = reservation(reservationId)
redis.call("HSET", paymentsKey, eventId,
  cjson.encode({
    reservationId = reservationId, type = paymentType, status = result.status, outcome = outcome, reason = reason,
  }))
return answer({ reservation = result, status = result.status, outcome = outcome, reason = reason, replayed = false })
