/**
 * The stock model as the edge sees it: the module of durable-objects/ that src/ imports for the
 * model's types and rules (.dependency-cruiser.cjs keeps src/ to this, ./support.ts and
 * ./objects.ts). It loads anywhere, Node included (drizzle-kit, the bench and the tools load src/
 * modules that use it), so it re-exports only plain code: the engine's types and rules, the draw's
 * and the stock object's answers, shard names and the queue event format. The tools src/ shares
 * with the objects (the log, the coalesced runner, the hash) are in ./support.ts; the classes that
 * need the Workers runtime (the objects, the mirror client) are in ./objects.ts.
 *
 * The types are defined next to the engine units that decide them (engine/); this module is their
 * public face, so src/ never depends on how durable-objects/ is laid out inside.
 */

export type { Audit, AuditedReservation } from "./engine/audit";
export type { SkuSettings } from "./engine/configuration";
export type { DrawInfo } from "./engine/opening-draw";
export type {
  PaymentAnswer,
  PaymentCommand,
  PaymentMoney,
  PaymentReason,
  PaymentTotals,
  PaymentType,
} from "./engine/payments";
export { PAYMENT_REASONS } from "./engine/payments";
export {
  type AccessTier,
  type EngineStorage,
  isOnSale,
  type Outcome,
  type Pricing,
  type Reservation,
  type ReserveAnswer,
  type ReserveOutcome,
  type ReserveRequest,
  type SaleStatus,
  type SkuState,
  type SpentDigest,
  sumShards,
} from "./engine/types";
export type { MirrorCheck } from "./mirror-publisher";
export {
  eventsOfMessage,
  ORDER_EVENT_TYPES,
  type OrderEvent,
  OrderEventSchema,
  RESERVATION_STATUSES,
  type ReservationStatus,
  statusOf,
} from "./order-events";
export { homeShard, shardName } from "./shard-name";
export type { SkuChange } from "./sku-change";
export type { AdminFace, EdgeFace, RepairDone, ShardFace, StockStub } from "./stock-faces";
