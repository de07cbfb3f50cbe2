/**
 * The tools src/ shares with the objects, none of them the stock model: the log (the same JSON
 * lines and request ids on both sides), the runner that does background work once at a time (the
 * objects' outbox and the Worker's metrics flush), and the hash (home shards, spent-nonce digests,
 * the pages' ETags). Plain code that loads in Node too, like ./stock-model.ts.
 */
export { CoalescedRunner } from "./coalesced-runner";
export { fnv1a } from "./fnv1a";
export { log } from "./log";
