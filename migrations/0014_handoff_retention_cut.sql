-- Retention cuts the feed by its key now (src/db/retention.ts): changed_at, the event's own time, does
-- not rise with position, and this index only cost a write per change.
DROP INDEX `order_changes_by_time`;