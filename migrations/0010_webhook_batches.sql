ALTER TABLE `webhook_deliveries` ADD `batch_id` text;--> statement-breakpoint
ALTER TABLE `webhook_endpoints` ADD `batch` text;