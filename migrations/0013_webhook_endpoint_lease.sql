ALTER TABLE `webhook_endpoints` ADD `lease` text;--> statement-breakpoint
ALTER TABLE `webhook_endpoints` ADD `lease_until` integer;