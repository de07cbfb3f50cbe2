CREATE TABLE `checkout_claims` (
	`reservation_id` text PRIMARY KEY NOT NULL,
	`attempt` integer NOT NULL,
	`params` text NOT NULL,
	`expires_at` integer NOT NULL,
	`claimed_at` integer NOT NULL
);
