CREATE TABLE `reconcile_difference_counts` (
	`kind` text PRIMARY KEY NOT NULL,
	`count` integer NOT NULL
);
--> statement-breakpoint
CREATE INDEX `processed_events_by_time` ON `processed_events` (`processed_at`);--> statement-breakpoint
CREATE INDEX `reconcile_runs_by_start` ON `reconcile_runs` (`started_at`);--> statement-breakpoint
-- Counts of the differences already there.
INSERT INTO `reconcile_difference_counts` (`kind`, `count`)
	SELECT `kind`, count(*) FROM `reconcile_differences` GROUP BY `kind`;
--> statement-breakpoint
-- Hand-written (drizzle-kit does not model triggers): every difference recorded is counted once;
-- pruning old runs (src/db/retention.ts) deletes differences but never lowers a count.
CREATE TRIGGER `reconcile_difference_counts_on_insert` AFTER INSERT ON `reconcile_differences`
BEGIN
	INSERT INTO `reconcile_difference_counts` (`kind`, `count`) VALUES (NEW.`kind`, 1)
		ON CONFLICT (`kind`) DO UPDATE SET `count` = `count` + 1;
END;
