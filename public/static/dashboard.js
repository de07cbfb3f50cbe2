// Operator dashboard: polls the admin API every 2 s, the shop hand-off's webhooks every 10 s. The admin
// token lives in sessionStorage only (this tab), and goes only to this origin's /admin/* routes.

// Types for the checker (`npm run check`: tsc with checkJs over public/tsconfig.dashboard.json, which
// also holds dashboard-console.js); the API's shapes are its answers' (docs/API.md,
// src/routes/contract-schemas.ts), the fields these scripts read.

/**
 * @typedef {{ code: string, message: string, details?: Record<string, unknown> }} ApiError
 * @typedef {{ total: number, available: number, held: number, sold: number }} StockCounts
 * @typedef {{ held: number, paid: number, expired: number, cancelled: number, refund_required: number }} OrderCounts
 * @typedef {{ available: number, held: number, sold: number, version: number }} MirrorCounts
 * @typedef {{ sku: string, openingWindowMs: number, seedHash: string, seed: string | null,
 *   entrants: number, decidedAt: string | null, opensAt: string, closesAt: string }} Draw
 * @typedef {{ paidUnits: number, amount: number | null, currency: string,
 *   otherCurrencies: { currency: string, paidUnits: number, amount: number | null }[] }} Revenue
 * @typedef {{ sku: string, name: string, status: "on_sale" | "paused" | "archived", perUserLimit: number,
 *   holdSeconds: number, startsAt: string | null, endsAt: string | null, shards: number,
 *   price: number | null, currency: string, stock: StockCounts, orders: OrderCounts, revenue?: Revenue,
 *   waitlist: number, mirror?: MirrorCounts | null, openingWindowMs?: number,
 *   phase?: "scheduled" | "open" | "ended" | "paused", opensInSeconds?: number | null,
 *   draw?: Draw | null, access?: { name: string, startsAt: string }[],
 *   variants?: { id: string, name: string, stock: StockCounts }[] }} AdminSku
 * @typedef {{ skus: AdminSku[] }} AdminSkuList
 * @typedef {{ sku: string, kind: string, repaired: boolean }} Difference
 * @typedef {{ runId: string, trigger: "cron" | "admin", startedAt: string, finishedAt: string | null,
 *   skusChecked: number, errors: number, differences: Difference[] }} ReconcileRun
 * @typedef {{ runs: ReconcileRun[] }} ReconcileRuns
 * @typedef {Partial<Omit<ReconcileRun, "differences">> & { id?: string, at?: string,
 *   differences?: Difference[] | number }} LegacyRun
 * @typedef {{ id: string, queue: string, body: unknown, attempts: number, receivedAt: string,
 *   replayedAt: string | null }} DeadLetter
 * @typedef {{ deadLetters: DeadLetter[], next?: string }} DeadLetterList
 * @typedef {{ id: string, url: string, events: string[], enabled: boolean, secret: string,
 *   lagSeconds?: number, batch?: { maxEvents: number, maxWaitMs: number } | null }} WebhookEndpoint
 * @typedef {{ webhooks: WebhookEndpoint[] }} WebhookEndpointList
 * @typedef {{ id: string, type: string, reservationId: string, status: "pending" | "delivered" | "failed",
 *   attempts: number, lastStatusCode: number | null, lastResponse: string | null,
 *   lastError?: string | null, nextAttemptAt: string | null }} WebhookDelivery
 * @typedef {{ deliveries: WebhookDelivery[] }} WebhookDeliveryList
 * @typedef {{ retried: number }} BulkRetryAnswer
 */
/**
 * An API answer: `json` is the body of type T when `ok` (the route's success shape), an ErrorBody
 * otherwise, and null when the body was not JSON.
 * @template [T=unknown]
 * @typedef {{ status: number, ok: boolean, json: T }} Answer
 */
/**
 * An endpoint's card and what the page keeps for it: its secret (shown on asking), the failing list
 * last drawn, and the retries asked here whose outcome is not known yet (by delivery id), each with
 * when its POST was answered.
 * @typedef {{ id: string, card: HTMLElement, secret: string, revealed: boolean, failingKey: string,
 *   retries: Map<string, { what: string, attempts: number, queuedAt: number }> }} Hook
 * @typedef {{ pending: Answer<WebhookDeliveryList>, failed: Answer<WebhookDeliveryList>, askedAt: number }} DeliveryLog
 * @typedef {{ list: Answer<WebhookEndpointList>, logs: DeliveryLog[] }} Webhooks
 * @typedef {{ renderSkuActions(card: HTMLElement, view: AdminSku): void, refreshConsole(): Promise<void>,
 *   forgetConsole(): void }} DashboardConsole
 * @typedef {Window & typeof globalThis & { dashboardConsole?: DashboardConsole }} DashboardWindow
 */

/**
 * The page's elements that are more than an HTMLElement, by id (dashboard.html).
 * @typedef {{ token: HTMLInputElement, "lookup-q": HTMLInputElement, "sku-card": HTMLTemplateElement,
 *   "webhook-card": HTMLTemplateElement, "sku-dialog": HTMLDialogElement, "confirm-dialog": HTMLDialogElement,
 *   "confirm-type-input": HTMLInputElement, "confirm-ok": HTMLButtonElement, "sku-save": HTMLButtonElement,
 *   "f-sku": HTMLInputElement, "mint-dialog": HTMLDialogElement, "mint-tier": HTMLSelectElement,
 *   "mint-count": HTMLInputElement, "mint-ok": HTMLButtonElement }} Elements
 */
/**
 * The element with this id: dashboard.html has every id these scripts ask for.
 * @template {string} K
 * @param {K} id
 * @returns {K extends keyof Elements ? Elements[K] : HTMLElement}
 */
const $ = (id) => /** @type {K extends keyof Elements ? Elements[K] : HTMLElement} */ (document.getElementById(id));
/** The console's half (dashboard-console.js), once loaded. */
const page = /** @type {DashboardWindow} */ (window);
const TOKEN_KEY = "flashgate.adminToken";
const REFRESH_MS = 2000;
// A read not answered in this long is given up: one hung answer must not hold the board or its refresh.
const READ_MS = 10_000;
const HISTORY = 60; // samples kept per SKU for the sparkline (two minutes)
const SPARK_MIN_COLUMNS = 15; // the sparkline's columns are never narrower than a fifteenth of its box
// The webhook panel costs one request for the endpoints and two per endpoint (its pending and its failed
// deliveries, up to LOG_LIMIT each): asked every 10 s, and every 2 s for a while after a retry, whose
// outcome the operator waits for.
const WEBHOOKS_MS = 10_000;
const AFTER_RETRY_MS = 30_000;
const LOG_LIMIT = 100;
const FAILING_SHOWN = 20; // failing deliveries listed per endpoint
const RESPONSE_SHOWN = 120; // characters of an answer's body shown (the log keeps up to 1 KB)

/** @type {Map<string, HTMLElement>} */
const cards = new Map(); // sku -> card element
// sku -> [{ t, count }]: the server's counter of reservations held (flashgate_reservations_total,
// result="held", read from GET /metrics), sampled on each refresh. Rates are its differences, so they
// count every reservation the gateway made, whenever this tab was opened, and none a cancel undoes.
/** @type {Map<string, { t: number, count: number }[]>} */
const snapshots = new Map();
/**
 * The last read of that counter: { at, counts: Map(sku -> held total) }, or null when /metrics failed.
 * @type {{ at: number, counts: Map<string, number> } | null}
 */
let counters = null;
let timer = 0;
let lastLetters = "";
/**
 * The dead-letter page shown: null for the newest, else the cursor it was asked after; the cursors of
 * the pages before it (for Newer), and the `next` of the page shown (for Older; none from a gateway
 * that does not page them).
 * @type {string | null}
 */
let lettersAfter = null;
/** @type {(string | null)[]} */
let lettersTrail = [];
/** @type {string | undefined} */
let lettersNext;
const LETTERS_PAGE = 100;
/** @type {Map<string, Hook>} */
const hooks = new Map(); // endpoint id -> { card, secret, revealed, failingKey, retries }
let webhooksAt = 0; // when the webhook panel is asked again
let fastWebhooksUntil = 0; // after a retry: asked on every refresh until then
/**
 * Each SKU's sale log (API.md v1.4 "The verifiable sale"), from its public signed checkpoint: the tree
 * size, the root hash, and when this page first saw that checkpoint; and when each SKU's was asked
 * last. Asked every LOG_MS per SKU; never when the gateway keeps no log (GET /api/log/key: 404).
 * @type {Map<string, { size: number, root: string, seenAt: number }>}
 */
const logs = new Map();
/** @type {Map<string, number>} */
const logsAsked = new Map();
const LOG_MS = 5000;
/** Whether the gateway keeps a sale log: null until GET /api/log/key answered. @type {boolean | null} */
let logKept = null;

/**
 * "1 unit", "3 units": a count with its noun, singular for exactly one.
 * @param {number} n
 * @param {string} one
 * @param {string} [many]
 */
function plural(n, one, many = `${one}s`) {
  return `${n} ${n === 1 ? one : many}`;
}

/**
 * The answer a path that would not reach the route it names gets, without being sent: "." and ".."
 * are resolved away by the URL standard, encoded or not ("%2e%2e" too), so /admin/users/../orders
 * would ask /admin/orders. Null when the browser sends the path as built.
 * @param {string} path
 * @returns {Answer | null}
 */
function unsendable(path) {
  const built = path.split("?")[0];
  const resolved = new URL(path, location.origin).pathname;
  if (resolved === built) return null;
  const message = `${built} is not sent: the browser would ask ${resolved} instead (a "." or ".." cannot be a path segment).`;
  return { status: 0, ok: false, json: { error: { code: "UNSENDABLE_PATH", message } } };
}

/**
 * An admin API call. Every segment a caller puts in `path` is encodeURIComponent'd; a path that would
 * still resolve elsewhere is not sent (unsendable).
 * @param {string} method
 * @param {string} path
 * @param {unknown} [body]
 * @returns {Promise<Answer>}
 */
async function admin(method, path, body) {
  const refused = unsendable(path);
  if (refused) return refused;
  const token = sessionStorage.getItem(TOKEN_KEY);
  /** @type {Record<string, string>} */
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  // Only reads are given up after READ_MS: a change is left to answer, as the gateway may still apply it.
  const signal = method === "GET" ? AbortSignal.timeout(READ_MS) : undefined;
  let response;
  let text;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
    });
    text = await response.text();
  } catch (error) {
    const reason =
      error instanceof Error && error.name === "TimeoutError" ? `no answer within ${READ_MS / 1000} s` : String(error);
    return {
      status: 0,
      ok: false,
      json: { error: { code: "NO_ANSWER", message: reason } },
    };
  }
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    // not JSON
  }
  return { status: response.status, ok: response.ok, json };
}

/**
 * The error an answer carries, if any.
 * @param {Answer} answer
 * @returns {ApiError | undefined}
 */
function apiError(answer) {
  return /** @type {{ error?: ApiError } | null} */ (answer.json)?.error;
}

/** @param {Answer} answer */
function errorText(answer) {
  const error = apiError(answer);
  return error ? `${error.code}: ${error.message}` : `HTTP ${answer.status}`;
}

function showLogin(message = "") {
  clearTimeout(timer);
  $("board").hidden = true;
  $("login").hidden = false;
  $("sign-out").hidden = true;
  $("login-error").textContent = message;
  $("token").focus();
}

function showBoard() {
  $("login").hidden = true;
  $("board").hidden = false;
  $("sign-out").hidden = false;
}

// Money ----------------------------------------------------------------------------------------

/**
 * An amount in minor units of `currency` as this browser writes money ("€25.00", "¥2,500"): the
 * currency's own number of decimals, from Intl. An unknown code is shown as the number and the code.
 */
/**
 * @param {number} minor
 * @param {string | null | undefined} currency
 */
function money(minor, currency) {
  const code = String(currency ?? "usd").toUpperCase();
  try {
    const format = new Intl.NumberFormat(undefined, { style: "currency", currency: code });
    return format.format(minor / 10 ** (format.resolvedOptions().maximumFractionDigits ?? 2));
  } catch {
    return `${minor} ${code} (minor units)`;
  }
}

// SKUs -----------------------------------------------------------------------------------------

/**
 * The element of a card (its template in dashboard.html) that shows `name`.
 * @param {ParentNode} card
 * @param {string} name
 */
function field(card, name) {
  return /** @type {HTMLElement} */ (card.querySelector(`[data-field="${name}"]`));
}

/**
 * A copy of a template's element (dashboard.html).
 * @param {HTMLTemplateElement} template
 */
function instance(template) {
  return /** @type {HTMLElement} */ (template.content.firstElementChild?.cloneNode(true));
}

/** @param {string} sku */
function cardFor(sku) {
  let card = cards.get(sku);
  if (!card) {
    card = instance($("sku-card"));
    card.dataset.sku = sku;
    cards.set(sku, card);
    $("skus").append(card);
  }
  return card;
}

/**
 * The server's reservation counters, per SKU, from the Prometheus text of GET /metrics: the sum of
 * `flashgate_reservations_total{sku, result="held"}` (every isolate's, totalled by the server).
 */
/** @param {string} text */
function parseHeldCounters(text) {
  /** @type {Map<string, number>} */
  const counts = new Map();
  for (const line of text.split("\n")) {
    if (!line.startsWith("flashgate_reservations_total{")) continue;
    const labels = line.slice(line.indexOf("{") + 1, line.lastIndexOf("}"));
    if (!/(^|,)result="held"/.test(labels)) continue;
    const sku = /(?:^|,)sku="((?:[^"\\]|\\.)*)"/.exec(labels)?.[1];
    const value = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (sku !== undefined && Number.isFinite(value)) counts.set(sku, (counts.get(sku) ?? 0) + value);
  }
  return counts;
}

async function readCounters() {
  try {
    const token = sessionStorage.getItem(TOKEN_KEY);
    const headers = { authorization: `Bearer ${token}` };
    const response = await fetch("/metrics", { headers, signal: AbortSignal.timeout(READ_MS) });
    if (!response.ok) return null;
    return { at: Date.now(), counts: parseHeldCounters(await response.text()) };
  } catch {
    return null;
  }
}

/**
 * Reservations per second between successive reads of the server's counter for `sku`.
 * @param {string} sku
 */
function rates(sku) {
  const samples = snapshots.get(sku) ?? [];
  const count = counters?.counts.get(sku) ?? 0;
  if (counters && samples.at(-1)?.t !== counters.at) samples.push({ t: counters.at, count });
  while (samples.length > HISTORY + 1) samples.shift();
  snapshots.set(sku, samples);
  const out = [];
  for (const [i, sample] of samples.entries()) {
    const before = samples[i - 1];
    if (!before) continue;
    const dt = (sample.t - before.t) / 1000;
    out.push(dt > 0 ? Math.max(0, sample.count - before.count) / dt : 0);
  }
  // The window the rates cover: from the oldest sample kept (this tab's first read, or two minutes ago).
  const [first, last] = [samples[0], samples.at(-1)];
  const windowSeconds = first && last && samples.length > 1 ? Math.round((last.t - first.t) / 1000) : 0;
  return { values: out, windowSeconds };
}

/**
 * The reservations graph: one column per read of the counter (every 2 s), its height the rate over
 * that read, scaled to the window's peak, newest on the right. A line drawn through the rates read as
 * an empty box (issue #50): flat on the box's floor when nothing was reserved, and a burst became a
 * stroke on its right edge. With nothing to draw the box says why, in words (`empty`): no reservation
 * in the window, the first two reads awaited, or /metrics unreadable.
 * @param {HTMLElement} card
 * @param {number[]} values
 * @param {string | null} empty
 */
function drawSpark(card, values, empty) {
  const svg = field(card, "spark");
  const bars = svg.querySelector("path");
  const label = field(card, "spark-empty");
  label.hidden = empty === null;
  label.textContent = empty ?? "";
  svg.dataset.state = empty === null ? "drawn" : "empty";
  if (!bars) return;
  if (empty !== null) {
    bars.setAttribute("d", "");
    return;
  }
  const peak = Math.max(...values);
  // The columns span the box once two minutes are read; until then they are wider (a box of 15 at
  // least), so the first reads show as columns, not as slivers at the right edge.
  const shown = Math.min(HISTORY, Math.max(SPARK_MIN_COLUMNS, values.length));
  const step = 240 / shown;
  const first = shown - values.length; // the columns before the first read stay empty, on the left
  const columns = values.flatMap((v, i) => {
    if (v <= 0) return [];
    const x = (first + i) * step;
    const top = 40 - Math.max(2, (v / peak) * 36);
    return [`M${x.toFixed(1)} 40V${top.toFixed(1)}H${(x + step - 1).toFixed(1)}V40Z`];
  });
  bars.setAttribute("d", columns.join(""));
}

/** "45 s", "12:05", "1:02:03": a wait in seconds, as a clock reads it. */
/** @param {number} seconds */
function countdown(seconds) {
  if (seconds < 60) return `${seconds} s`;
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = String(seconds % 60).padStart(2, "0");
  return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${s}` : `${m}:${s}`;
}

/**
 * The last reconciliation run (set by renderReconcile), for each card's stock ↔ D1 line.
 * @type {LegacyRun | null}
 */
let lastRun = null;

/** @param {string} sku */
function consistencyText(sku) {
  if (!lastRun) return "no reconciliation run yet";
  const when = lastRun.finishedAt ?? lastRun.startedAt;
  const at = when ? ` (${new Date(when).toLocaleTimeString()})` : "";
  if (!Array.isArray(lastRun.differences)) return `last run${at}: differences not listed`;
  const mine = lastRun.differences.filter((d) => d.sku === sku);
  if (mine.length === 0) return `no difference at the last reconciliation${at}`;
  const repaired = mine.filter((d) => d.repaired).length;
  return `${plural(mine.length, "difference")} at the last reconciliation${at}, ${repaired} repaired`;
}

/** @param {AdminSku} view */
function mirrorText(view) {
  const m = view.mirror;
  if (m === null || m === undefined) return "off";
  const s = view.stock;
  const same = m.available === s.available && m.held === s.held && m.sold === s.sold;
  const counts = `v${m.version} · ${m.available} available / ${m.held} held / ${m.sold} sold`;
  return `${counts} · ${same ? "in sync" : "differs from the stock object"}`;
}

/**
 * The SKU's opening draw: window, entrants, the committed seed hash, then the revealed seed.
 * @param {Draw} draw
 * @param {number} now
 */
function drawText(draw, now) {
  const opens = Date.parse(draw.opensAt);
  const closes = Date.parse(draw.closesAt);
  const phase = draw.decidedAt
    ? `decided ${new Date(draw.decidedAt).toLocaleTimeString()}`
    : now < opens
      ? `opens in ${Math.ceil((opens - now) / 1000)} s`
      : now < closes
        ? "window open"
        : "deciding…";
  return `${draw.openingWindowMs} ms window · ${plural(draw.entrants, "entrant")} · ${phase}`;
}

/**
 * A 64-hex value on one line of its own: shown cut to the card's width (the whole value in its
 * title and its text, for find and select), with a Copy button. Built once, then only updated.
 * @param {HTMLElement} container
 * @param {string} key
 * @param {string} label
 * @param {string} value
 */
function hashLine(container, key, label, value) {
  let line = /** @type {HTMLElement | null} */ (container.querySelector(`[data-hash="${key}"]`));
  if (!line) {
    line = document.createElement("span");
    line.className = "draw-line";
    line.dataset.hash = key;
    const name = document.createElement("span");
    name.textContent = label;
    const code = document.createElement("code");
    code.className = "hash";
    const copy = document.createElement("button");
    copy.type = "button";
    copy.className = "secondary small";
    copy.textContent = "Copy";
    const said = document.createElement("span");
    said.className = "muted small";
    said.setAttribute("role", "status");
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(code.textContent ?? "");
        said.textContent = "copied";
      } catch {
        // No clipboard here: the whole value is shown, to select by hand.
        code.classList.add("whole");
        said.textContent = "select it above";
      }
      setTimeout(() => {
        said.textContent = "";
      }, 3000);
    });
    line.append(name, code, copy, said);
    container.append(line);
  }
  const code = /** @type {HTMLElement} */ (line.querySelector("code"));
  if (code.textContent !== value) {
    code.textContent = value;
    code.title = value;
  }
  line.querySelector("button")?.setAttribute("aria-label", `Copy the ${label} ${value}`);
  return line;
}

/**
 * @param {HTMLElement} dd
 * @param {Draw} draw
 * @param {number} now
 */
function renderDraw(dd, draw, now) {
  let summary = dd.querySelector(".draw-summary");
  if (!summary) {
    summary = document.createElement("span");
    summary.className = "draw-summary";
    dd.append(summary);
  }
  summary.textContent = drawText(draw, now);
  hashLine(dd, "seedHash", "seed hash", draw.seedHash);
  if (draw.seed) hashLine(dd, "seed", "seed", draw.seed);
  else dd.querySelector('[data-hash="seed"]')?.remove();
  let secret = dd.querySelector(".draw-secret");
  if (!draw.seed && !secret) {
    secret = document.createElement("span");
    secret.className = "draw-secret muted";
    secret.textContent = "seed secret until decided";
    dd.append(secret);
  } else if (draw.seed) secret?.remove();
}

/**
 * @param {AdminSku} view
 * @param {number} now
 */
function renderSku(view, now) {
  const card = cardFor(view.sku);
  const { stock, orders } = view;
  field(card, "name").textContent = view.name;
  field(card, "sku").textContent = view.sku;
  // A SKU on sale with nothing left is sold out, whatever its configured status says.
  // A sale not open yet (phase, added to the contract) reads "scheduled", one past its end "ended".
  const phase = view.phase === "scheduled" || view.phase === "ended" ? view.phase : null;
  const status = view.status === "on_sale" && stock.available === 0 ? "sold_out" : (phase ?? view.status);
  field(card, "status").textContent =
    status === "scheduled" && view.opensInSeconds
      ? `opens in ${countdown(view.opensInSeconds)}`
      : status.replace("_", " ");
  field(card, "status").dataset.status = status;
  for (const part of /** @type {const} */ (["sold", "held", "available"])) {
    const share = stock.total > 0 ? (stock[part] / stock.total) * 100 : 0;
    /** @type {HTMLElement} */ (card.querySelector(`[data-bar="${part}"]`)).style.width = `${share}%`;
    field(card, part).textContent = String(stock[part]);
  }
  card
    .querySelector(".bar")
    ?.setAttribute("aria-label", `${stock.sold} sold, ${stock.held} held, ${stock.available} available`);
  field(card, "total").textContent = String(stock.total);
  // Units are compared with units (the bar, the mirror) and orders with orders (the reconciliation,
  // which matches each reservation with its D1 row): an order of 2 units is one row and two units.
  field(card, "units-held").textContent = String(stock.held);
  field(card, "units-sold").textContent = String(stock.sold);
  field(card, "orders-held").textContent = String(orders.held);
  field(card, "orders-paid").textContent = String(orders.paid);
  field(card, "closed").textContent =
    `${orders.expired} expired · ${orders.cancelled} cancelled · ${orders.refund_required} refund required`;
  field(card, "consistency").textContent = consistencyText(view.sku);
  // Sizes (API.md v1.4): each one's units available of its stock, a sold-out one said so.
  const sizes = view.variants ?? [];
  field(card, "sizes-label").hidden = sizes.length === 0;
  field(card, "sizes").hidden = sizes.length === 0;
  field(card, "sizes").textContent = sizes
    .map((v) => `${v.name}: ${v.stock.available === 0 ? "sold out" : `${v.stock.available} of ${v.stock.total} left`}`)
    .join(" · ");
  field(card, "waitlist").textContent = `${view.waitlist} waiting`;
  const draw = view.draw ?? null;
  field(card, "draw-label").hidden = draw === null;
  field(card, "draw").hidden = draw === null;
  if (draw) renderDraw(field(card, "draw"), draw, now);
  field(card, "mirror").textContent = mirrorText(view);
  const log = logs.get(view.sku);
  field(card, "log-label").hidden = !log;
  field(card, "log").hidden = !log;
  if (log) {
    const root = `${log.root.slice(0, 12)}…`;
    field(card, "log").textContent =
      `${plural(log.size, "entry", "entries")} · signed checkpoint seen ${new Date(log.seenAt).toLocaleTimeString()} · root ${root}`;
    field(card, "log").title = `Root hash ${log.root}`;
  }
  const { values, windowSeconds } = rates(view.sku);
  const last = values.at(-1) ?? 0;
  const peak = Math.max(0, ...values);
  // The count is D1's order rows (one per reservation, whatever became of it): durable, so a restart
  // of the gateway or of its metrics resets nothing. The rates name the window they are taken over
  // (from this page's first read of /metrics, up to the last two minutes).
  const recorded = orders.held + orders.paid + orders.expired + orders.cancelled + orders.refund_required;
  const over = span(windowSeconds);
  const rate =
    counters === null
      ? "rate unavailable (GET /metrics failed)"
      : windowSeconds === 0
        ? "rate: measuring…"
        : peak === 0
          ? `no reservations in the last ${over}`
          : `now ${last.toFixed(1)}/s · peak ${peak.toFixed(1)}/s over the last ${over}`;
  drawSpark(
    card,
    values,
    counters === null ? "no data" : windowSeconds === 0 ? "measuring…" : peak === 0 ? `none in ${over}` : null,
  );
  field(card, "rate").textContent = `${rate} · ${recorded} made in all (orders in D1)`;
  field(card, "rate").dataset.total = String(recorded);
  field(card, "price").textContent =
    view.price === null || view.price === undefined
      ? "no price (amounts not checked)"
      : `${money(view.price, view.currency)} a unit`;
  field(card, "revenue").textContent = revenueText(view);
  field(card, "schedule").textContent = scheduleText(view);
  page.dashboardConsole?.renderSkuActions(card, view);
}

/**
 * Paid units × price, as the admin view reports it (`revenue`, from D1's paid orders): the amount in
 * the SKU's currency, and apart any paid in a currency it had before.
 */
/** @param {AdminSku} view */
function revenueText(view) {
  const r = view.revenue;
  if (!r || typeof r !== "object") return "not reported by this gateway";
  /** @param {number} n */
  const units = (n) => `${n} paid ${n === 1 ? "unit" : "units"}`;
  const priced = view.price !== null && view.price !== undefined;
  const own =
    r.amount === null
      ? `none: ${priced ? "no amount recorded" : "no price set"} · ${units(r.paidUnits)}`
      : money(r.amount, r.currency);
  const others = (r.otherCurrencies ?? []).map(
    (o) => `${o.amount === null ? "no amount" : money(o.amount, o.currency)} in ${o.currency} (earlier currency)`,
  );
  const ownUnits = r.paidUnits - (r.otherCurrencies ?? []).reduce((sum, o) => sum + o.paidUnits, 0);
  const main = r.amount === null ? own : `${own} from ${units(ownUnits)}`;
  return [main, ...others].join(" + ");
}

/** A length of time in words: "45 s", "15 min", "1 h 30 min". */
/** @param {number} seconds */
function span(seconds) {
  if (seconds < 60) return `${seconds} s`;
  if (seconds % 60 !== 0) return countdown(seconds);
  const h = Math.floor(seconds / 3600);
  const m = (seconds % 3600) / 60;
  return h === 0 ? `${m} min` : m === 0 ? `${h} h` : `${h} h ${m} min`;
}

/** When the sale runs, in this browser's time, with the limits a shopper meets. */
/** @param {AdminSku} view */
function scheduleText(view) {
  /** @param {string} iso */
  const at = (iso) => new Date(iso).toLocaleString();
  const times =
    view.startsAt || view.endsAt
      ? `${view.startsAt ? `from ${at(view.startsAt)}` : "no start time"}, ${view.endsAt ? `until ${at(view.endsAt)}` : "no end time"}`
      : "no start or end time";
  const shards = `${view.shards} ${view.shards === 1 ? "shard" : "shards"}`;
  return `${times} · ${view.perUserLimit} per shopper · holds of ${span(view.holdSeconds)} · ${shards}`;
}

/**
 * Reads the signed checkpoint of each SKU whose last read is LOG_MS old: a C2SP signed note whose
 * second line is the tree size and third the base64 root hash. A SKU without a log yet (404) keeps
 * nothing, so its card shows no log line. The signature is checked by `npm run verify-sale`, not here.
 * @param {string[]} skus
 */
async function readLogs(skus) {
  if (logKept === null) {
    const key = await fetch("/api/log/key", { signal: AbortSignal.timeout(READ_MS) }).catch(() => null);
    if (!key) return;
    logKept = key.ok;
  }
  if (!logKept) return;
  const now = Date.now();
  const due = skus.filter((sku) => now - (logsAsked.get(sku) ?? 0) >= LOG_MS);
  await Promise.all(
    due.map(async (sku) => {
      logsAsked.set(sku, now);
      const signal = AbortSignal.timeout(READ_MS);
      const answer = await fetch(`/api/skus/${encodeURIComponent(sku)}/log/checkpoint`, { signal }).catch(() => null);
      if (!answer) return;
      const lines = answer.ok ? (await answer.text().catch(() => "")).split("\n") : [];
      const size = Number(lines[1]);
      const root = lines[2] ?? "";
      const known = logs.get(sku);
      if (!Number.isInteger(size) || !root) {
        if (answer.status === 404) logs.delete(sku);
        return;
      }
      const same = known && known.size === size && known.root === root;
      logs.set(sku, { size, root, seenAt: same ? known.seenAt : Date.now() });
    }),
  );
}

// Dead letters ---------------------------------------------------------------------------------

/** @param {unknown} body */
function describeEvent(body) {
  const event = /** @type {{ type?: unknown, reservationId?: unknown } | null} */ (body);
  if (event && typeof event === "object" && typeof event.type === "string") {
    return `${event.type} ${event.reservationId ?? ""}`.trim();
  }
  return JSON.stringify(body).slice(0, 80);
}

/** @param {DeadLetterList} list */
function renderLetters(list) {
  const letters = list.deadLetters;
  lettersNext = list.next;
  // A full page may have older letters after it, reached through the page's `next` (docs/API.md).
  $("dl-older").hidden = lettersNext === undefined || letters.length < LETTERS_PAGE;
  $("dl-newer").hidden = lettersAfter === null;
  const key = JSON.stringify(letters);
  if (key === lastLetters) return;
  lastLetters = key;
  const pending = letters.filter((l) => l.replayedAt === null).length;
  const page = lettersTrail.length > 0 ? `, page ${lettersTrail.length + 1}` : "";
  $("dl-count").textContent = `(${pending} pending, ${letters.length} shown${page})`;
  $("dl-empty").hidden = letters.length > 0 || lettersAfter !== null;
  const rows = letters.map((letter) => {
    const tr = document.createElement("tr");
    tr.dataset.id = letter.id;
    const cells = [
      new Date(letter.receivedAt).toLocaleTimeString(),
      letter.id,
      letter.queue,
      describeEvent(letter.body),
      String(letter.attempts),
    ];
    for (const text of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      tr.append(td);
    }
    const state = document.createElement("td");
    if (letter.replayedAt === null) {
      const button = document.createElement("button");
      button.type = "button";
      button.className = "small";
      button.textContent = "Replay";
      button.addEventListener("click", () => replay(letter.id, button));
      state.append(button);
    } else {
      state.textContent = `replayed ${new Date(letter.replayedAt).toLocaleTimeString()}`;
      state.className = "muted";
    }
    tr.append(state);
    return tr;
  });
  $("dead-letters").replaceChildren(...rows);
}

/** The dead letters stored before the page shown (Older), or the page before it again (Newer). */
$("dl-older").addEventListener("click", () => {
  if (lettersNext === undefined) return;
  lettersTrail.push(lettersAfter);
  lettersAfter = lettersNext;
  refresh();
});
$("dl-newer").addEventListener("click", () => {
  lettersAfter = lettersTrail.pop() ?? null;
  refresh();
});

/**
 * @param {string} id
 * @param {HTMLButtonElement} button
 */
async function replay(id, button) {
  button.disabled = true;
  const answer = await admin("POST", `/admin/dead-letters/${encodeURIComponent(id)}/replay`);
  // Its own line: the board's error line is rewritten by every refresh.
  $("dl-error").textContent = answer.ok ? "" : `Replay of ${id} failed: ${errorText(answer)}`;
  button.disabled = false;
  await refresh();
}

// Shop hand-off (webhooks) ---------------------------------------------------------------------

/** The endpoints, and for each its pending and its failed deliveries (null where the list failed). */
/** @returns {Promise<Webhooks>} */
async function loadWebhooks() {
  const list = /** @type {Answer<WebhookEndpointList>} */ (await admin("GET", "/admin/webhooks"));
  if (!list.ok) return { list, logs: [] };
  const logs = await Promise.all(
    list.json.webhooks.map(async (endpoint) => {
      const path = `/admin/webhooks/${encodeURIComponent(endpoint.id)}/deliveries?limit=${LOG_LIMIT}&status=`;
      // Pending first, then failed, one after the other: a delivery that fails for good between the two
      // reads is then in one of them. Read side by side, a retry's row could be in neither (failed when
      // the pending list was read, pending again when the failed one was) and pass for accepted.
      const askedAt = Date.now();
      const pending = await admin("GET", `${path}pending`);
      const failed = await admin("GET", `${path}failed`);
      return /** @type {DeliveryLog} */ ({ pending, failed, askedAt });
    }),
  );
  return { list, logs };
}

/** @param {number | null} code */
const answered2xx = (code) => code !== null && code >= 200 && code < 300;

/**
 * A pending delivery being retried: an attempt of it was made and not accepted (a redelivery by hand of
 * an accepted one is pending too, after a 2xx). One never tried yet, or on its first try, is not.
 */
/** @param {WebhookDelivery} delivery */
function beingRetried(delivery) {
  if (delivery.status !== "pending" || answered2xx(delivery.lastStatusCode)) return false;
  return delivery.attempts > 1 || (delivery.attempts > 0 && delivery.lastResponse !== null);
}

/** "12", or "100+" when the log gave as many as it was asked for. */
/** @param {unknown[]} list */
const countOf = (list) => (list.length >= LOG_LIMIT ? `${LOG_LIMIT}+` : String(list.length));

/**
 * A card's button (dashboard.html's templates), by its data-action.
 * @param {ParentNode} card
 * @param {string} name
 */
function action(card, name) {
  return /** @type {HTMLButtonElement} */ (card.querySelector(`[data-action="${name}"]`));
}

/** @param {string} id */
function hookFor(id) {
  let hook = hooks.get(id);
  if (!hook) {
    const card = instance($("webhook-card"));
    card.dataset.endpoint = id;
    // retries: delivery id -> { what, attempts } of the retries asked here whose outcome is not known yet.
    /** @type {Hook} */
    const made = { id, card, secret: "", revealed: false, failingKey: "", retries: new Map() };
    hook = made;
    field(card, "id").textContent = id;
    action(card, "reveal").addEventListener("click", () => reveal(made, !made.revealed));
    action(card, "copy").addEventListener("click", () => copySecret(made));
    const all = action(card, "retry-all");
    all.addEventListener("click", () => retryAll(made, all));
    hooks.set(id, hook);
    showSecret(hook);
  }
  return hook;
}

/**
 * The secret is on screen only while the operator asked for it (Show), never by default.
 * @param {Hook} hook
 */
function showSecret(hook) {
  const code = field(hook.card, "secret");
  code.textContent = hook.revealed ? hook.secret : "hidden";
  code.classList.toggle("muted", !hook.revealed);
  const button = action(hook.card, "reveal");
  button.textContent = hook.revealed ? "Hide" : "Show";
  button.setAttribute("aria-label", `${hook.revealed ? "Hide" : "Show"} the signing secret of ${hook.id}`);
  action(hook.card, "copy").setAttribute("aria-label", `Copy the signing secret of ${hook.id}`);
}

/**
 * @param {Hook} hook
 * @param {boolean} revealed
 */
function reveal(hook, revealed) {
  hook.revealed = revealed;
  showSecret(hook);
}

/** @param {Hook} hook */
async function copySecret(hook) {
  try {
    await navigator.clipboard.writeText(hook.secret);
    say(hook, "ok", `The signing secret of ${hook.id} is on the clipboard.`);
  } catch {
    reveal(hook, true);
    say(hook, "error", "This browser refused the clipboard: the secret is shown above, select and copy it.");
  }
}

/** A result in the endpoint's status line: scrolled into view when it answers a click, not when a poll brings it. */
/**
 * @param {Hook} hook
 * @param {"ok" | "error"} kind
 * @param {string} text
 * @param {{ scroll?: boolean }} [options]
 */
function say(hook, kind, text, { scroll = true } = {}) {
  const message = field(hook.card, "message");
  message.dataset.kind = kind;
  message.textContent = text;
  if (scroll) message.scrollIntoView({ block: "nearest" });
}

/**
 * What became of the retries asked here: one that left the pending and failed lists was accepted; one
 * failed again after more attempts says so. Until then (an attempt in flight, or refused with retries
 * left, which the log does not tell apart) the status line keeps "Retry queued". Only lists asked for
 * after a retry was queued (`askedAt`) judge it: one asked before may still show it failed.
 */
/**
 * @param {Hook} hook
 * @param {WebhookDelivery[]} pending
 * @param {WebhookDelivery[]} failed
 * @param {boolean} complete
 * @param {number} askedAt
 */
function followRetries(hook, pending, failed, complete, askedAt) {
  for (const [id, retry] of hook.retries) {
    if (retry.queuedAt > askedAt) continue;
    const now = pending.find((d) => d.id === id) ?? failed.find((d) => d.id === id);
    if (!now) {
      if (complete) say(hook, "ok", `${retry.what} was accepted on retry.`, { scroll: false });
      hook.retries.delete(id);
    } else if (now.status === "failed" && now.attempts > retry.attempts) {
      const code = now.lastError ?? (now.lastStatusCode === null ? "no answer" : `HTTP ${now.lastStatusCode}`);
      say(hook, "error", `${retry.what} was refused again (${code}).`, { scroll: false });
      hook.retries.delete(id);
    }
  }
}

/**
 * @param {Hook} hook
 * @param {WebhookEndpoint} endpoint
 * @param {WebhookDelivery} delivery
 */
function deliveryItem(hook, endpoint, delivery) {
  const li = document.createElement("li");
  li.className = "delivery";
  li.dataset.id = delivery.id;
  const text = document.createElement("div");
  const what = document.createElement("p");
  what.className = "what";
  const type = document.createElement("b");
  type.textContent = delivery.type;
  const reservation = document.createElement("code");
  reservation.className = "wrap";
  reservation.textContent = delivery.reservationId;
  const badge = document.createElement("span");
  badge.className = "badge";
  const state = delivery.status === "failed" ? "failed" : "retrying";
  badge.dataset.status = state;
  badge.textContent = state;
  what.append(type, reservation, badge);

  const why = document.createElement("p");
  why.className = "why";
  // Why it failed: in the server's words when it records them (`lastError`: "answered 500", "timed out
  // after 10 s without an answer"), with the start of the receiver's answer when there was one.
  const attempts = `${delivery.attempts} ${delivery.attempts === 1 ? "attempt" : "attempts"}`;
  const code = delivery.lastStatusCode === null ? "no answer" : `HTTP ${delivery.lastStatusCode}`;
  const body = (delivery.lastResponse ?? "").replace(/\s+/g, " ").trim();
  const short = body.length > RESPONSE_SHOWN ? `${body.slice(0, RESPONSE_SHOWN)}…` : body;
  if (delivery.lastError) {
    const answered = delivery.lastStatusCode !== null && short ? `: ${short}` : "";
    why.textContent = `${attempts} · ${delivery.lastError}${answered}`;
  } else {
    why.textContent = `${attempts} · last answer ${code}${short ? `: ${short}` : " (empty body)"}`;
  }
  if (delivery.lastResponse) why.title = delivery.lastResponse;

  const when = document.createElement("p");
  when.className = "muted";
  if (delivery.status === "failed") when.textContent = "no attempt left: retry it by hand";
  else if (!endpoint.enabled) when.textContent = "the endpoint is disabled: enable it to retry";
  else if (delivery.nextAttemptAt) {
    when.textContent = `next attempt ${new Date(delivery.nextAttemptAt).toLocaleTimeString()}`;
  }
  text.append(what, why, when);

  const button = document.createElement("button");
  button.type = "button";
  button.className = "secondary small";
  button.dataset.retry = delivery.id;
  button.textContent = "Retry";
  button.setAttribute("aria-label", `Retry ${delivery.type} of ${delivery.reservationId} now`);
  // The API refuses a disabled endpoint's retry (409): nothing could be sent.
  button.disabled = !endpoint.enabled;
  button.addEventListener("click", () => retryDelivery(hook, endpoint, delivery, button));
  li.append(text, button);
  return li;
}

/**
 * An endpoint's batch setting (API.md v1.4 "Webhook batches") in an operator's words.
 * @param {{ maxEvents: number, maxWaitMs: number } | null | undefined} batch
 */
function batchText(batch) {
  if (batch === undefined) return "one event each (batches not reported by this gateway)";
  if (batch === null) return "one event each";
  const wait = batch.maxWaitMs >= 1000 ? `${batch.maxWaitMs / 1000} s` : `${batch.maxWaitMs} ms`;
  return `batches of up to ${batch.maxEvents} events, sent when full or after ${wait}`;
}

/** Past this lag the shipped alert rule (FlashgateWebhookLag, ops/prometheus) fires. */
const LAG_ALERT_SECONDS = 300;

/**
 * An endpoint's lag (API `lagSeconds`: the age of its oldest pending delivery) in an operator's words.
 * @param {number | undefined} seconds
 * @returns {{ text: string, kind: "" | "late" | "alert" }}
 */
function lagText(seconds) {
  if (seconds === undefined) return { text: "not reported by this gateway", kind: "" };
  if (seconds === 0) return { text: "none: nothing is pending", kind: "" };
  const age = seconds < 120 ? `${seconds} s` : `${Math.floor(seconds / 60)} min ${seconds % 60} s`;
  return seconds > LAG_ALERT_SECONDS
    ? { text: `${age} behind: past the ${LAG_ALERT_SECONDS / 60}-minute alert`, kind: "alert" }
    : { text: `${age} behind (the oldest pending delivery)`, kind: "late" };
}

/**
 * @param {Hook} hook
 * @param {WebhookEndpoint} endpoint
 * @param {DeliveryLog} log
 */
function renderWebhook(hook, endpoint, log) {
  const { card } = hook;
  hook.secret = endpoint.secret;
  showSecret(hook);
  field(card, "url").textContent = endpoint.url;
  field(card, "events").textContent = endpoint.events.join(", ");
  field(card, "batch").textContent = batchText(endpoint.batch);
  const enabled = endpoint.enabled ? "enabled" : "disabled";
  field(card, "enabled").textContent = enabled;
  field(card, "enabled").dataset.status = enabled;
  const lag = lagText(endpoint.lagSeconds);
  field(card, "lag").textContent = lag.text;
  field(card, "lag").dataset.kind = lag.kind;
  const refused = [log.pending, log.failed].find((answer) => !answer.ok);
  if (refused) {
    field(card, "counts").textContent = `unavailable: ${errorText(refused)}`;
    return 0;
  }
  const pending = log.pending.json.deliveries;
  const failed = log.failed.json.deliveries;
  const retrying = pending.filter(beingRetried);
  field(card, "counts").textContent =
    `${countOf(pending)} pending (${retrying.length} being retried) · ${countOf(failed)} failed`;
  const failing = [...failed, ...retrying];
  const capped = failed.length >= LOG_LIMIT || pending.length >= LOG_LIMIT;
  followRetries(hook, pending, failed, !capped, log.askedAt);
  field(card, "failing-count").textContent = `(${failing.length}${capped ? "+" : ""})`;
  field(card, "no-failing").hidden = failing.length > 0;
  const retryAll = action(card, "retry-all");
  retryAll.hidden = failing.length === 0;
  retryAll.disabled = !endpoint.enabled;
  retryAll.setAttribute("aria-label", `Retry all failing deliveries of ${endpoint.id} now`);

  const shown = failing.slice(0, FAILING_SHOWN);
  const key = JSON.stringify([endpoint.enabled, failing.length, shown]);
  if (key === hook.failingKey) return failing.length;
  hook.failingKey = key;
  // A re-render keeps the keyboard where it was: on the same delivery's Retry button.
  const focused = /** @type {HTMLElement | null} */ (document.activeElement)?.dataset?.retry;
  const items = shown.map((delivery) => deliveryItem(hook, endpoint, delivery));
  if (failing.length > shown.length) {
    const more = document.createElement("li");
    more.className = "muted";
    more.textContent = `and ${failing.length - shown.length} more: GET /admin/webhooks/${endpoint.id}/deliveries?status=failed`;
    items.push(more);
  }
  field(card, "failing").replaceChildren(...items);
  if (focused) /** @type {HTMLElement | null} */ (card.querySelector(`[data-retry="${CSS.escape(focused)}"]`))?.focus();
  return failing.length;
}

/** @param {Webhooks} webhooks */
function renderWebhooks({ list, logs }) {
  const error = $("wh-error");
  if (list.status === 404) {
    error.textContent = "not available: this gateway has no webhook routes (contract v1.2)";
    return;
  }
  if (!list.ok) {
    error.textContent = `GET /admin/webhooks: ${errorText(list)}`;
    return;
  }
  error.textContent = "";
  const endpoints = list.json.webhooks;
  $("wh-empty").hidden = endpoints.length > 0;
  const ids = new Set(endpoints.map((endpoint) => endpoint.id));
  for (const [id, hook] of hooks) {
    if (!ids.has(id)) {
      hook.card.remove();
      hooks.delete(id);
    }
  }
  const container = $("webhooks");
  let failing = 0;
  endpoints.forEach((endpoint, i) => {
    const hook = hookFor(endpoint.id);
    // Moved only when out of place: moving a node would take the focus off a button in it.
    if (container.children[i] !== hook.card) container.insertBefore(hook.card, container.children[i] ?? null);
    const log = logs[i];
    if (log) failing += renderWebhook(hook, endpoint, log);
  });
  $("wh-count").textContent =
    endpoints.length === 0
      ? ""
      : `(${endpoints.length} ${endpoints.length === 1 ? "endpoint" : "endpoints"}, ${failing} failing)`;
}

/**
 * @param {Hook} hook
 * @param {WebhookEndpoint} endpoint
 * @param {WebhookDelivery} delivery
 * @param {HTMLButtonElement} button
 */
async function retryDelivery(hook, endpoint, delivery, button) {
  button.disabled = true;
  const what = `${delivery.type} of ${delivery.reservationId}`;
  try {
    const path = `/admin/webhooks/${encodeURIComponent(endpoint.id)}/deliveries/${encodeURIComponent(delivery.id)}/retry`;
    const answer = await admin("POST", path);
    if (answer.ok) {
      say(hook, "ok", `Retry queued: ${what}, it is tried now.`);
      hook.retries.set(delivery.id, { what, attempts: delivery.attempts, queuedAt: Date.now() });
    } else {
      say(hook, "error", `Retry of ${what} refused: ${errorText(answer)}`);
    }
  } catch (error) {
    say(hook, "error", `Retry of ${what} not sent: ${error}`);
  }
  button.disabled = false;
  fastWebhooksUntil = Date.now() + AFTER_RETRY_MS;
  webhooksAt = 0;
  await refresh();
}

/** Every failed and pending delivery of the endpoint, tried now (POST /admin/webhooks/:id/retry, API.md v1.3). */
/**
 * @param {Hook} hook
 * @param {HTMLButtonElement} button
 */
async function retryAll(hook, button) {
  button.disabled = true;
  try {
    const answer = /** @type {Answer<BulkRetryAnswer | null>} */ (
      await admin("POST", `/admin/webhooks/${encodeURIComponent(hook.id)}/retry`)
    );
    if (answer.ok) {
      const n = answer.json?.retried ?? 0;
      say(hook, "ok", `Retry of all queued: ${n} ${n === 1 ? "delivery" : "deliveries"} of ${hook.id} tried now.`);
    } else {
      say(hook, "error", `Retry of all refused: ${errorText(answer)}`);
    }
  } catch (error) {
    say(hook, "error", `Retry of all not sent: ${error}`);
  }
  button.disabled = false;
  fastWebhooksUntil = Date.now() + AFTER_RETRY_MS;
  webhooksAt = 0;
  await refresh();
}

// Reconciliation -------------------------------------------------------------------------------

/**
 * The latest run; an older gateway answered a bare list, with `id` and `at`.
 * @param {Answer<ReconcileRuns | LegacyRun[] | null>} answer
 */
function renderReconcile(answer) {
  const target = $("reconcile");
  if (answer.status === 404) {
    target.textContent = "not available (this gateway has no reconciliation runs endpoint yet)";
    return;
  }
  if (!answer.ok) {
    target.textContent = `unavailable: ${errorText(answer)}`;
    return;
  }
  /** @type {LegacyRun[]} */
  const list = Array.isArray(answer.json) ? answer.json : (answer.json?.runs ?? []);
  const run = list[0];
  lastRun = run ?? null;
  if (!run) {
    target.textContent = "no run yet";
    return;
  }
  const when = run.finishedAt ?? run.startedAt ?? run.at;
  const differences = Array.isArray(run.differences) ? run.differences.length : run.differences;
  target.textContent = [
    `run ${run.runId ?? run.id ?? "?"}${run.trigger ? ` (${run.trigger})` : ""}`,
    when ? new Date(when).toLocaleString() : null,
    run.skusChecked === undefined ? null : `${plural(run.skusChecked, "SKU")} checked`,
    differences === undefined ? null : plural(differences, "difference"),
  ]
    .filter(Boolean)
    .join(" · ");
}

// Loop -----------------------------------------------------------------------------------------

async function refresh() {
  clearTimeout(timer);
  try {
    const started = Date.now();
    const askWebhooks = started >= webhooksAt || started < fastWebhooksUntil;
    // The page of letters asked for: a refresh still out when Older or Newer asked another shows nothing.
    const lettersAsked = lettersAfter;
    const [skus, letters, runs, webhooks, read] = await Promise.all([
      /** @type {Promise<Answer<AdminSkuList>>} */ (admin("GET", "/admin/skus")),
      /** @type {Promise<Answer<DeadLetterList>>} */ (
        admin("GET", `/admin/dead-letters${lettersAfter === null ? "" : `?after=${encodeURIComponent(lettersAfter)}`}`)
      ),
      /** @type {Promise<Answer<ReconcileRuns>>} */ (admin("GET", "/admin/reconcile/runs?limit=1")),
      askWebhooks ? loadWebhooks() : null,
      readCounters(),
    ]);
    if (skus.ok) await readLogs(skus.json.skus.map((view) => view.sku));
    counters = read;
    if (skus.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin("That token was refused (401).");
      return;
    }
    showBoard();
    $("board-error").textContent = skus.ok ? "" : `GET /admin/skus: ${errorText(skus)}`;
    renderReconcile(runs);
    if (skus.ok) {
      const now = Date.now();
      const listed = new Set(skus.json.skus.map((view) => view.sku));
      // An archived SKU leaves the list (API.md v1.3): its card goes with it.
      for (const [sku, card] of cards) {
        if (!listed.has(sku)) {
          card.remove();
          cards.delete(sku);
          snapshots.delete(sku);
          logs.delete(sku);
          logsAsked.delete(sku);
        }
      }
      skus.json.skus.forEach((view, i) => {
        const card = cardFor(view.sku);
        // Moved only when out of place: moving a node would take the focus off a button in it.
        if ($("skus").children[i] !== card) $("skus").insertBefore(card, $("skus").children[i] ?? null);
        renderSku(view, now);
      });
      $("no-skus").hidden = skus.json.skus.length > 0;
    }
    if (letters.ok && lettersAsked === lettersAfter) renderLetters(letters.json);
    if (webhooks) {
      renderWebhooks(webhooks);
      webhooksAt = started + WEBHOOKS_MS;
    }
    if (askWebhooks) await page.dashboardConsole?.refreshConsole();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    $("board-error").textContent = `Gateway unreachable: ${error}`;
  }
  // One refresh waits at a time, though a click may have started one while another was out.
  clearTimeout(timer);
  timer = setTimeout(refresh, REFRESH_MS);
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  refresh();
});
$("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  cards.clear();
  snapshots.clear();
  logs.clear();
  logsAsked.clear();
  lastLetters = "";
  lettersAfter = null;
  lettersTrail = [];
  lettersNext = undefined;
  $("skus").replaceChildren();
  hooks.clear();
  webhooksAt = 0;
  fastWebhooksUntil = 0;
  $("webhooks").replaceChildren();
  page.dashboardConsole?.forgetConsole();
  showLogin();
});

$("wh-origin").textContent = location.origin;

if (sessionStorage.getItem(TOKEN_KEY)) refresh();
else showLogin();
