ALTER TABLE `orders` ADD `variant` text;--> statement-breakpoint
ALTER TABLE `payments` ADD `variant` text;