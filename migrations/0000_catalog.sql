CREATE TABLE `skus` (
	`sku` text PRIMARY KEY NOT NULL,
	`name` text NOT NULL,
	`shards` integer NOT NULL,
	`created_at` integer NOT NULL,
	`updated_at` integer NOT NULL
);
