/**
 * The stock model as the edge sees it: what src/ imports for the model's types and rules, and the
 * stock object's faces (one per caller, ./stock-faces.ts). It loads anywhere, Node included
 * (drizzle-kit, the bench and the tools load src/ modules that use it), so it re-exports only plain
 * code: the engine's types and rules, the draw's and the stock object's answers, shard names and the
 * queue event format. What src/ shares with the objects as tools (log, hash, runner) it imports from
 * ../shared/ directly; .dependency-cruiser.cjs says which paths src/ may take.
 *
 * The types are defined next to the engine units that decide them (../engine/); this module is their
 * public face, so src/ never depends on how the engine is laid out inside.
 */

export { claimTier, sameAdmission } from "../engine/access";
export type { Audit, AuditedReservation } from "../engine/audit";
export type { SkuSettings } from "../engine/configuration";
export type { DrawInfo } from "../engine/opening-draw";
export type {
  PaymentAnswer,
  PaymentCommand,
  PaymentMoney,
  PaymentReason,
  PaymentTotals,
  PaymentType,
} from "../engine/payments";
export { PAYMENT_REASONS } from "../engine/payments";
export {
  type AccessTier,
  type EngineStorage,
  isOnSale,
  isScheduled,
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
} from "../engine/types";
export {
  eventsOfMessage,
  ORDER_EVENT_TYPES,
  type OrderEvent,
  OrderEventSchema,
  RESERVATION_STATUSES,
  type ReservationStatus,
  statusOf,
} from "../shared/order-events";
export { homeShard, shardName } from "../shared/shard-name";
export type { MirrorCheck } from "./mirror-publisher";
export type { SkuChange } from "./sku-change";
export type { AdminFace, EdgeFace, PaymentVerdict, RepairDone, ShardFace, StockStub } from "./stock-faces";
