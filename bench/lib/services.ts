// The machine's own services for the classic pipeline point (RabbitMQ, MariaDB): reachable already
// (this kind of machine starts them before a session), or started with the machine's own command
// (the commands the machine's notes give), or reported as skipped with the reason. Never fatal.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { connect } from "node:net";
import { processes } from "../../tools/proc";
import { log, sleep } from "./log";

export interface Service {
  name: string;
  port: number;
  /** The command this kind of machine starts it with. */
  start: string;
  /** Process names (`/proc/<pid>/comm`) whose CPU is the service's, and a word their command line must hold. */
  comm: string[];
  cmdline?: string;
}

export const RABBITMQ: Service = {
  name: "RabbitMQ",
  port: 5672,
  start: "rabbitmq-server -detached",
  comm: ["beam.smp"],
  cmdline: "rabbit",
};

export const MARIADB: Service = {
  name: "MariaDB",
  port: 3306,
  start: "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
  comm: ["mariadbd", "mysqld"],
};

function reachable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1000, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

/** Pids of the running processes named one of `comm` (and whose command line holds `cmdline`). */
export function pidsNamed(comm: string[], cmdline?: string): number[] {
  return processes(
    (pid) =>
      comm.includes(readFileSync(`/proc/${pid}/comm`, "utf8").trim()) &&
      (!cmdline || readFileSync(`/proc/${pid}/cmdline`, "utf8").includes(cmdline)),
  );
}

export type Ready = { ok: true; pids: number[]; started: boolean } | { ok: false; reason: string };

/**
 * The service answering on its port, with the pids whose CPU is its own; when nothing answers, its
 * start command once, then up to `waitMs` for the port (RabbitMQ takes some seconds to boot).
 */
export async function ensureService(service: Service, waitMs = 60_000): Promise<Ready> {
  let started = false;
  if (!(await reachable(service.port))) {
    log(`${service.name}: nothing on 127.0.0.1:${service.port}; starting it: ${service.start}`);
    const failed = await new Promise<string | undefined>((resolve) =>
      execFile("sh", ["-c", service.start], { timeout: waitMs }, (err, _out, stderr) =>
        resolve(err ? `exit ${err.code ?? err.signal}: ${stderr.trim().slice(0, 200)}` : undefined),
      ),
    );
    const deadline = Date.now() + waitMs;
    while (!(await reachable(service.port)) && Date.now() < deadline) await sleep(500);
    if (!(await reachable(service.port)))
      return {
        ok: false,
        reason: `${service.name} was not running on 127.0.0.1:${service.port} and \`${service.start}\` did not start it${failed ? ` (${failed})` : ""}`,
      };
    started = true;
  }
  const pids = pidsNamed(service.comm, service.cmdline);
  if (pids.length === 0)
    return {
      ok: false,
      reason: `${service.name} answers on 127.0.0.1:${service.port} but no process named ${service.comm.join(" or ")} was found to meter`,
    };
  return { ok: true, pids, started };
}
