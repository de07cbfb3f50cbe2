CREATE TABLE `payments` (
	`position` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`event_id` text NOT NULL,
	`source` text NOT NULL,
	`reservation_id` text NOT NULL,
	`sku` text NOT NULL,
	`user_id` text NOT NULL,
	`amount` integer NOT NULL,
	`currency` text NOT NULL,
	`outcome` text NOT NULL,
	`reason` text,
	`received_at` integer NOT NULL
);
--> statement-breakpoint
CREATE UNIQUE INDEX `payments_by_event` ON `payments` (`event_id`);--> statement-breakpoint
CREATE INDEX `payments_by_outcome` ON `payments` (`outcome`,`position`);--> statement-breakpoint
CREATE INDEX `orders_paid_by_sku` ON `orders` (`sku`,`currency`,`quantity`,`amount`) WHERE status = 'paid';--> statement-breakpoint
-- Hand-written (drizzle-kit does not model triggers): a flagged payment is owed to every enabled
-- endpoint subscribed to `payment.refund_required`, in the transaction that records it, once (a
-- retried event's insert does nothing, and so fires nothing). Its key is the negative of the
-- payment's position, so it never meets an order change's (src/db/schema.ts webhook_deliveries).
CREATE TRIGGER `webhook_deliveries_on_refund_required` AFTER INSERT ON `payments`
	WHEN NEW.`outcome` = 'refund_required'
BEGIN
	INSERT INTO `webhook_deliveries`
		(`endpoint_id`, `position`, `type`, `reservation_id`, `status`, `attempts`, `next_attempt_at`, `created_at`, `updated_at`)
	SELECT e.`id`, -NEW.`position`, 'payment.refund_required', NEW.`reservation_id`, 'pending', 0, t.`now`, t.`now`, t.`now`
	FROM `webhook_endpoints` e, (SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS `now`) t
	WHERE e.`enabled` = 1 AND EXISTS (SELECT 1 FROM json_each(e.`events`) WHERE `value` = 'payment.refund_required');
END;
