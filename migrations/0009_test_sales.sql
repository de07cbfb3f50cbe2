ALTER TABLE `orders` ADD `test` integer DEFAULT false NOT NULL;--> statement-breakpoint
ALTER TABLE `payments` ADD `test` integer DEFAULT false NOT NULL;