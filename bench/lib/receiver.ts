import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { log } from "./log";

/** The webhook receiver in its own Node process: its URL, its pid (CPU from /proc), and a stop. */
export interface ReceiverProcess {
  url: string;
  pid: number;
  stop(): Promise<void>;
}

const CHILD = fileURLToPath(new URL("./receiver-child.ts", import.meta.url));

/**
 * Starts tools/webhook-receiver.ts in a child process (./receiver-child.ts), with this process's own
 * loader flags (tsx): its verifying and answering runs beside workerd, never on this process's event
 * loop, which hosts Miniflare and must stay free for it.
 */
export async function startReceiverProcess(): Promise<ReceiverProcess> {
  const child = spawn(process.execPath, [...process.execArgv, CHILD], { stdio: ["pipe", "pipe", "inherit"] });
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const line = out.split("\n")[0];
      if (out.includes("\n") && line) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`the webhook receiver exited (${code}) before it listened`)));
  });
  const pid = child.pid ?? 0;
  log(`webhook receiver: ${url} (pid ${pid})`);
  return {
    url,
    pid,
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.stdin.end();
        setTimeout(() => child.kill("SIGKILL"), 5000).unref();
      }),
  };
}
