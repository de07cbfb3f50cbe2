CREATE TABLE `checkout_sessions` (
	`session_id` text PRIMARY KEY NOT NULL,
	`reservation_id` text NOT NULL,
	`url` text NOT NULL,
	`expires_at` integer NOT NULL,
	`created_at` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `checkout_sessions_by_reservation` ON `checkout_sessions` (`reservation_id`,`created_at`);--> statement-breakpoint
ALTER TABLE `payments` ADD `refund_status` text;--> statement-breakpoint
ALTER TABLE `payments` ADD `refund_via` text;--> statement-breakpoint
ALTER TABLE `payments` ADD `refund_id` text;--> statement-breakpoint
ALTER TABLE `payments` ADD `refund_at` integer;--> statement-breakpoint
ALTER TABLE `payments` ADD `refund_note` text;--> statement-breakpoint
ALTER TABLE `payments` ADD `refund_attempts` integer DEFAULT 0 NOT NULL;