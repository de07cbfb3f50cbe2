CREATE TABLE `order_changes` (
	`position` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`reservation_id` text NOT NULL,
	`status` text NOT NULL,
	`amount` integer,
	`currency` text,
	`changed_at` integer NOT NULL
);
--> statement-breakpoint
CREATE TABLE `webhook_deliveries` (
	`endpoint_id` text NOT NULL,
	`position` integer NOT NULL,
	`type` text NOT NULL,
	`reservation_id` text NOT NULL,
	`status` text NOT NULL,
	`attempts` integer DEFAULT 0 NOT NULL,
	`last_status_code` integer,
	`last_response` text,
	`next_attempt_at` integer,
	`lease` text,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`endpoint_id`, `position`)
) WITHOUT ROWID; -- hand-written: the key is the table (one B-tree entry per delivery)
--> statement-breakpoint
CREATE INDEX `webhook_deliveries_due` ON `webhook_deliveries` (`endpoint_id`,`next_attempt_at`) WHERE status = 'pending';--> statement-breakpoint
CREATE INDEX `webhook_deliveries_by_lease` ON `webhook_deliveries` (`lease`) WHERE lease IS NOT NULL;--> statement-breakpoint
CREATE INDEX `webhook_deliveries_failed` ON `webhook_deliveries` (`endpoint_id`,`position`) WHERE status = 'failed';--> statement-breakpoint
CREATE TABLE `webhook_endpoints` (
	`id` text PRIMARY KEY NOT NULL,
	`url` text NOT NULL,
	`events` text NOT NULL,
	`enabled` integer NOT NULL,
	`secret` text NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
--> statement-breakpoint
ALTER TABLE `orders` ADD `amount` integer;--> statement-breakpoint
ALTER TABLE `orders` ADD `currency` text;--> statement-breakpoint
-- The orders already there enter the feed once each, as they stand, oldest change first.
INSERT INTO `order_changes` (`reservation_id`, `status`, `amount`, `currency`, `changed_at`)
	SELECT `reservation_id`, `status`, `amount`, `currency`, `updated_at` FROM `orders` ORDER BY `updated_at`, `reservation_id`;
--> statement-breakpoint
-- Hand-written (drizzle-kit does not model triggers): every new order row and every change of an
-- order's status takes the next position of the feed, in the statement that made the change.
CREATE TRIGGER `order_changes_on_insert` AFTER INSERT ON `orders`
BEGIN
	INSERT INTO `order_changes` (`reservation_id`, `status`, `amount`, `currency`, `changed_at`)
		VALUES (NEW.`reservation_id`, NEW.`status`, NEW.`amount`, NEW.`currency`, NEW.`updated_at`);
END;
--> statement-breakpoint
CREATE TRIGGER `order_changes_on_status` AFTER UPDATE OF `status` ON `orders`
	WHEN OLD.`status` IS NOT NEW.`status`
BEGIN
	INSERT INTO `order_changes` (`reservation_id`, `status`, `amount`, `currency`, `changed_at`)
		VALUES (NEW.`reservation_id`, NEW.`status`, NEW.`amount`, NEW.`currency`, NEW.`updated_at`);
END;
--> statement-breakpoint
-- Each change is owed to every enabled endpoint subscribed to its type: the deliveries are written
-- in the same transaction as the change, due now (ms since the epoch by D1's clock, as every time
-- of the delivery schedule: src/handoff/deliveries.ts).
CREATE TRIGGER `webhook_deliveries_on_change` AFTER INSERT ON `order_changes`
BEGIN
	INSERT INTO `webhook_deliveries`
		(`endpoint_id`, `position`, `type`, `reservation_id`, `status`, `attempts`, `next_attempt_at`, `created_at`, `updated_at`)
	SELECT e.`id`, NEW.`position`, 'order.' || NEW.`status`, NEW.`reservation_id`, 'pending', 0, t.`now`, t.`now`, t.`now`
	FROM `webhook_endpoints` e, (SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS `now`) t
	WHERE e.`enabled` = 1 AND EXISTS (SELECT 1 FROM json_each(e.`events`) WHERE `value` = 'order.' || NEW.`status`);
END;
