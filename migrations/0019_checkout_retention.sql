CREATE INDEX `checkout_claims_by_expiry` ON `checkout_claims` (`expires_at`);--> statement-breakpoint
CREATE INDEX `checkout_sessions_by_expiry` ON `checkout_sessions` (`expires_at`);