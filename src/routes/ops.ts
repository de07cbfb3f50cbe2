import { Hono } from "hono";
import type { AppEnv } from "../http/context";

export const ops = new Hono<AppEnv>();

ops.get("/healthz", (c) => c.json({ ok: true }));
