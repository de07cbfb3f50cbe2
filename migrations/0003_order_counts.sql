CREATE TABLE `order_counts` (
	`sku` text NOT NULL,
	`status` text NOT NULL,
	`count` integer NOT NULL,
	PRIMARY KEY(`sku`, `status`)
);
--> statement-breakpoint
-- Counts of the rows already there.
INSERT INTO `order_counts` (`sku`, `status`, `count`)
	SELECT `sku`, `status`, count(*) FROM `orders` GROUP BY `sku`, `status`;
--> statement-breakpoint
-- Hand-written (drizzle-kit does not model triggers): the counts move with every row change.
CREATE TRIGGER `order_counts_on_insert` AFTER INSERT ON `orders`
BEGIN
	INSERT INTO `order_counts` (`sku`, `status`, `count`) VALUES (NEW.`sku`, NEW.`status`, 1)
		ON CONFLICT (`sku`, `status`) DO UPDATE SET `count` = `count` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `order_counts_on_status` AFTER UPDATE OF `status`, `sku` ON `orders`
	WHEN OLD.`status` IS NOT NEW.`status` OR OLD.`sku` IS NOT NEW.`sku`
BEGIN
	UPDATE `order_counts` SET `count` = `count` - 1 WHERE `sku` = OLD.`sku` AND `status` = OLD.`status`;
	INSERT INTO `order_counts` (`sku`, `status`, `count`) VALUES (NEW.`sku`, NEW.`status`, 1)
		ON CONFLICT (`sku`, `status`) DO UPDATE SET `count` = `count` + 1;
END;
--> statement-breakpoint
CREATE TRIGGER `order_counts_on_delete` AFTER DELETE ON `orders`
BEGIN
	UPDATE `order_counts` SET `count` = `count` - 1 WHERE `sku` = OLD.`sku` AND `status` = OLD.`status`;
END;
