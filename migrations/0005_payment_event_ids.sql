CREATE TABLE `payment_event_ids` (
	`event_id` text PRIMARY KEY NOT NULL,
	`reservation_id` text NOT NULL,
	`type` text NOT NULL,
	`amount` integer,
	`currency` text,
	`received_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `payment_event_ids_by_time` ON `payment_event_ids` (`received_at`);