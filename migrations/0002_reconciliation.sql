CREATE TABLE `reconcile_differences` (
	`id` integer PRIMARY KEY AUTOINCREMENT NOT NULL,
	`run_id` text NOT NULL,
	`sku` text NOT NULL,
	`kind` text NOT NULL,
	`expected` text NOT NULL,
	`actual` text NOT NULL,
	`repaired` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `reconcile_differences_by_run` ON `reconcile_differences` (`run_id`);--> statement-breakpoint
CREATE TABLE `reconcile_runs` (
	`id` text PRIMARY KEY NOT NULL,
	`trigger` text NOT NULL,
	`started_at` integer NOT NULL,
	`finished_at` integer,
	`skus_checked` integer DEFAULT 0 NOT NULL,
	`differences` integer DEFAULT 0 NOT NULL,
	`errors` integer DEFAULT 0 NOT NULL
);
--> statement-breakpoint
CREATE TABLE `reconcile_watermarks` (
	`sku` text NOT NULL,
	`shard` integer NOT NULL,
	`seq` integer NOT NULL,
	`updated_at` integer NOT NULL,
	PRIMARY KEY(`sku`, `shard`)
);
--> statement-breakpoint
ALTER TABLE `skus` ADD `total_stock` integer DEFAULT 0 NOT NULL;