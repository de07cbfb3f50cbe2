import { Hono } from "hono";
import type { AppEnv } from "../http/context";
import { ROUTES } from "./contract";
import { register } from "./register";

export const ops = new Hono<AppEnv>();

register(ops, ROUTES.healthz, (c) => c.json({ ok: true }));
