CREATE TABLE `dead_letters` (
	`id` text PRIMARY KEY NOT NULL,
	`queue` text NOT NULL,
	`body` text NOT NULL,
	`attempts` integer NOT NULL,
	`received_at` integer NOT NULL,
	`replayed_at` integer
);
--> statement-breakpoint
CREATE TABLE `orders` (
	`reservation_id` text PRIMARY KEY NOT NULL,
	`sku` text NOT NULL,
	`user_id` text NOT NULL,
	`quantity` integer NOT NULL,
	`status` text NOT NULL,
	`expires_at` integer,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL,
	`last_seq` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `orders_by_sku_status` ON `orders` (`sku`,`status`);--> statement-breakpoint
CREATE INDEX `orders_by_user` ON `orders` (`user_id`,`created_at`);--> statement-breakpoint
CREATE TABLE `processed_events` (
	`event_id` text PRIMARY KEY NOT NULL,
	`reservation_id` text NOT NULL,
	`processed_at` integer NOT NULL
);
