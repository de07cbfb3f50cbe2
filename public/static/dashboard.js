// Operator dashboard: polls the admin API every 2 s, the shop hand-off's webhooks every 10 s. The admin
// token lives in sessionStorage only (this tab), and goes only to this origin's /admin/* routes.

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "flashgate.adminToken";
const REFRESH_MS = 2000;
const HISTORY = 60; // samples kept per SKU for the sparkline (two minutes)
// The webhook panel costs one request for the endpoints and two per endpoint (its pending and its failed
// deliveries, up to LOG_LIMIT each): asked every 10 s, and every 2 s for a while after a retry, whose
// outcome the operator waits for.
const WEBHOOKS_MS = 10_000;
const AFTER_RETRY_MS = 30_000;
const LOG_LIMIT = 100;
const FAILING_SHOWN = 20; // failing deliveries listed per endpoint
const RESPONSE_SHOWN = 120; // characters of an answer's body shown (the log keeps up to 1 KB)

const cards = new Map(); // sku -> card element
// sku -> [{ t, count }]: the server's counter of reservations held (flashgate_reservations_total,
// result="held", read from GET /metrics), sampled on each refresh. Rates are its differences, so they
// count every reservation the gateway made, whenever this tab was opened, and none a cancel undoes.
const snapshots = new Map();
/** The last read of that counter: { at, counts: Map(sku -> held total) }, or null when /metrics failed. */
let counters = null;
let timer = 0;
let lastLetters = "";
const hooks = new Map(); // endpoint id -> { card, secret, revealed, failingKey, retries }
let webhooksAt = 0; // when the webhook panel is asked again
let fastWebhooksUntil = 0; // after a retry: asked on every refresh until then

async function admin(method, path, body) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let json = null;
  try {
    json = await response.json();
  } catch {
    // not JSON
  }
  return { status: response.status, ok: response.ok, json };
}

function errorText(answer) {
  const error = answer.json?.error;
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
function money(minor, currency) {
  const code = String(currency ?? "usd").toUpperCase();
  try {
    const format = new Intl.NumberFormat(undefined, { style: "currency", currency: code });
    return format.format(minor / 10 ** format.resolvedOptions().maximumFractionDigits);
  } catch {
    return `${minor} ${code} (minor units)`;
  }
}

// SKUs -----------------------------------------------------------------------------------------

function field(card, name) {
  return card.querySelector(`[data-field="${name}"]`);
}

function cardFor(sku) {
  let card = cards.get(sku);
  if (!card) {
    card = $("sku-card").content.firstElementChild.cloneNode(true);
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
function parseHeldCounters(text) {
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
    const response = await fetch("/metrics", { headers: { authorization: `Bearer ${token}` } });
    if (!response.ok) return null;
    return { at: Date.now(), counts: parseHeldCounters(await response.text()) };
  } catch {
    return null;
  }
}

/** Reservations per second between successive reads of the server's counter for `sku`. */
function rates(sku) {
  const samples = snapshots.get(sku) ?? [];
  const count = counters?.counts.get(sku) ?? 0;
  if (counters && samples.at(-1)?.t !== counters.at) samples.push({ t: counters.at, count });
  while (samples.length > HISTORY + 1) samples.shift();
  snapshots.set(sku, samples);
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    out.push(dt > 0 ? Math.max(0, samples[i].count - samples[i - 1].count) / dt : 0);
  }
  // The window the rates cover: from the oldest sample kept (this tab's first read, or two minutes ago).
  const windowSeconds = samples.length > 1 ? Math.round((samples.at(-1).t - samples[0].t) / 1000) : 0;
  return { values: out, windowSeconds };
}

function drawSpark(svg, values) {
  const line = svg.querySelector("polyline");
  const peak = Math.max(1, ...values);
  // The newest sample is on the right; before the first samples the line is flat at zero.
  const padded = [...Array(Math.max(0, HISTORY - values.length)).fill(0), ...values];
  const step = 240 / (HISTORY - 1);
  const points = padded.map((v, i) => `${(i * step).toFixed(1)},${(38 - (v / peak) * 36).toFixed(1)}`);
  line.setAttribute("points", points.join(" "));
}

/** "45 s", "12:05", "1:02:03": a wait in seconds, as a clock reads it. */
function countdown(seconds) {
  if (seconds < 60) return `${seconds} s`;
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = String(seconds % 60).padStart(2, "0");
  return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${s}` : `${m}:${s}`;
}

/** The last reconciliation run (set by renderReconcile), for each card's stock ↔ D1 line. */
let lastRun = null;

function consistencyText(sku) {
  if (!lastRun) return "no reconciliation run yet";
  const when = lastRun.finishedAt ?? lastRun.startedAt;
  const at = when ? ` (${new Date(when).toLocaleTimeString()})` : "";
  if (!Array.isArray(lastRun.differences)) return `last run${at}: differences not listed`;
  const mine = lastRun.differences.filter((d) => d.sku === sku);
  if (mine.length === 0) return `no difference at the last reconciliation${at}`;
  const repaired = mine.filter((d) => d.repaired).length;
  return `${mine.length} differences at the last reconciliation${at}, ${repaired} repaired`;
}

function mirrorText(view) {
  const m = view.mirror;
  if (m === null || m === undefined) return "off";
  const s = view.stock;
  const same = m.available === s.available && m.held === s.held && m.sold === s.sold;
  const counts = `v${m.version} · ${m.available} available / ${m.held} held / ${m.sold} sold`;
  return `${counts} · ${same ? "in sync" : "differs from the stock object"}`;
}

/** The SKU's opening draw: window, entrants, the committed seed hash, then the revealed seed. */
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
  return `${draw.openingWindowMs} ms window · ${draw.entrants} entrants · ${phase}`;
}

/**
 * A 64-hex value on one line of its own: shown cut to the card's width (the whole value in its
 * title and its text, for find and select), with a Copy button. Built once, then only updated.
 */
function hashLine(container, key, label, value) {
  let line = container.querySelector(`[data-hash="${key}"]`);
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
        await navigator.clipboard.writeText(code.textContent);
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
  const code = line.querySelector("code");
  if (code.textContent !== value) {
    code.textContent = value;
    code.title = value;
  }
  line.querySelector("button").setAttribute("aria-label", `Copy the ${label} ${value}`);
  return line;
}

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
  for (const part of ["sold", "held", "available"]) {
    const share = stock.total > 0 ? (stock[part] / stock.total) * 100 : 0;
    card.querySelector(`[data-bar="${part}"]`).style.width = `${share}%`;
    field(card, part).textContent = String(stock[part]);
  }
  card
    .querySelector(".bar")
    .setAttribute("aria-label", `${stock.sold} sold, ${stock.held} held, ${stock.available} available`);
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
  field(card, "waitlist").textContent = `${view.waitlist} waiting`;
  const draw = view.draw ?? null;
  field(card, "draw-label").hidden = draw === null;
  field(card, "draw").hidden = draw === null;
  if (draw) renderDraw(field(card, "draw"), draw, now);
  field(card, "mirror").textContent = mirrorText(view);
  const { values, windowSeconds } = rates(view.sku);
  drawSpark(field(card, "spark"), values);
  const last = values.at(-1) ?? 0;
  // The count is D1's order rows (one per reservation, whatever became of it): durable, so a restart
  // of the gateway or of its metrics resets nothing. The rates name the window they are taken over.
  const recorded = orders.held + orders.paid + orders.expired + orders.cancelled + orders.refund_required;
  const rate =
    counters === null
      ? "rate unavailable (GET /metrics failed)"
      : windowSeconds === 0
        ? "rate: measuring…"
        : `now ${last.toFixed(1)}/s · peak ${Math.max(0, ...values).toFixed(1)}/s over the last ${span(windowSeconds)}`;
  field(card, "rate").textContent = `${rate} · ${recorded} made in all (orders in D1)`;
  field(card, "rate").dataset.total = String(recorded);
  field(card, "price").textContent =
    view.price === null || view.price === undefined
      ? "no price (amounts not checked)"
      : `${money(view.price, view.currency)} a unit`;
  field(card, "revenue").textContent = revenueText(view);
  field(card, "schedule").textContent = scheduleText(view);
  window.dashboardConsole?.renderSkuActions(card, view);
}

/**
 * Paid units × price, as the admin view reports it (`revenue`, from D1's paid orders): the amount in
 * the SKU's currency, and apart any paid in a currency it had before.
 */
function revenueText(view) {
  const r = view.revenue;
  if (!r || typeof r !== "object") return "not reported by this gateway";
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
function span(seconds) {
  if (seconds < 60) return `${seconds} s`;
  if (seconds % 60 !== 0) return countdown(seconds);
  const h = Math.floor(seconds / 3600);
  const m = (seconds % 3600) / 60;
  return h === 0 ? `${m} min` : m === 0 ? `${h} h` : `${h} h ${m} min`;
}

/** When the sale runs, in this browser's time, with the limits a shopper meets. */
function scheduleText(view) {
  const at = (iso) => new Date(iso).toLocaleString();
  const times =
    view.startsAt || view.endsAt
      ? `${view.startsAt ? `from ${at(view.startsAt)}` : "no start time"}, ${view.endsAt ? `until ${at(view.endsAt)}` : "no end time"}`
      : "no start or end time";
  const shards = `${view.shards} ${view.shards === 1 ? "shard" : "shards"}`;
  return `${times} · ${view.perUserLimit} per shopper · holds of ${span(view.holdSeconds)} · ${shards}`;
}

// Dead letters ---------------------------------------------------------------------------------

function describeEvent(body) {
  if (body && typeof body === "object" && typeof body.type === "string") {
    return `${body.type} ${body.reservationId ?? ""}`.trim();
  }
  return JSON.stringify(body).slice(0, 80);
}

function renderLetters(letters) {
  const key = JSON.stringify(letters);
  if (key === lastLetters) return;
  lastLetters = key;
  const pending = letters.filter((l) => l.replayedAt === null).length;
  $("dl-count").textContent = `(${pending} pending, ${letters.length} shown)`;
  $("dl-empty").hidden = letters.length > 0;
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

async function replay(id, button) {
  button.disabled = true;
  const answer = await admin("POST", `/admin/dead-letters/${encodeURIComponent(id)}/replay`);
  $("board-error").textContent = answer.ok ? "" : `Replay of ${id} failed: ${errorText(answer)}`;
  button.disabled = false;
  await refresh();
}

// Shop hand-off (webhooks) ---------------------------------------------------------------------

/** The endpoints, and for each its pending and its failed deliveries (null where the list failed). */
async function loadWebhooks() {
  const list = await admin("GET", "/admin/webhooks");
  if (!list.ok) return { list, logs: [] };
  const logs = await Promise.all(
    list.json.webhooks.map(async (endpoint) => {
      const path = `/admin/webhooks/${encodeURIComponent(endpoint.id)}/deliveries?limit=${LOG_LIMIT}&status=`;
      const [pending, failed] = await Promise.all([admin("GET", `${path}pending`), admin("GET", `${path}failed`)]);
      return { pending, failed };
    }),
  );
  return { list, logs };
}

const answered2xx = (code) => code !== null && code >= 200 && code < 300;

/**
 * A pending delivery being retried: an attempt of it was made and not accepted (a redelivery by hand of
 * an accepted one is pending too, after a 2xx). One never tried yet, or on its first try, is not.
 */
function beingRetried(delivery) {
  if (delivery.status !== "pending" || answered2xx(delivery.lastStatusCode)) return false;
  return delivery.attempts > 1 || (delivery.attempts > 0 && delivery.lastResponse !== null);
}

/** "12", or "100+" when the log gave as many as it was asked for. */
const countOf = (list) => (list.length >= LOG_LIMIT ? `${LOG_LIMIT}+` : String(list.length));

function hookFor(id) {
  let hook = hooks.get(id);
  if (!hook) {
    const card = $("webhook-card").content.firstElementChild.cloneNode(true);
    card.dataset.endpoint = id;
    // retries: delivery id -> { what, attempts } of the retries asked here whose outcome is not known yet.
    hook = { id, card, secret: "", revealed: false, failingKey: "", retries: new Map() };
    field(card, "id").textContent = id;
    card.querySelector('[data-action="reveal"]').addEventListener("click", () => reveal(hook, !hook.revealed));
    card.querySelector('[data-action="copy"]').addEventListener("click", () => copySecret(hook));
    card.querySelector('[data-action="retry-all"]').addEventListener("click", (event) => retryAll(hook, event.target));
    hooks.set(id, hook);
    showSecret(hook);
  }
  return hook;
}

/** The secret is on screen only while the operator asked for it (Show), never by default. */
function showSecret(hook) {
  const code = field(hook.card, "secret");
  code.textContent = hook.revealed ? hook.secret : "hidden";
  code.classList.toggle("muted", !hook.revealed);
  const button = hook.card.querySelector('[data-action="reveal"]');
  button.textContent = hook.revealed ? "Hide" : "Show";
  button.setAttribute("aria-label", `${hook.revealed ? "Hide" : "Show"} the signing secret of ${hook.id}`);
  hook.card.querySelector('[data-action="copy"]').setAttribute("aria-label", `Copy the signing secret of ${hook.id}`);
}

function reveal(hook, revealed) {
  hook.revealed = revealed;
  showSecret(hook);
}

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
function say(hook, kind, text, { scroll = true } = {}) {
  const message = field(hook.card, "message");
  message.dataset.kind = kind;
  message.textContent = text;
  if (scroll) message.scrollIntoView({ block: "nearest" });
}

/**
 * What became of the retries asked here: one that left the pending and failed lists was accepted; one
 * failed again after more attempts says so. Until then (an attempt in flight, or refused with retries
 * left, which the log does not tell apart) the status line keeps "Retry queued".
 */
function followRetries(hook, pending, failed, complete) {
  for (const [id, retry] of hook.retries) {
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

function renderWebhook(hook, endpoint, log) {
  const { card } = hook;
  hook.secret = endpoint.secret;
  showSecret(hook);
  field(card, "url").textContent = endpoint.url;
  field(card, "events").textContent = endpoint.events.join(", ");
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
  followRetries(hook, pending, failed, !capped);
  field(card, "failing-count").textContent = `(${failing.length}${capped ? "+" : ""})`;
  field(card, "no-failing").hidden = failing.length > 0;
  const retryAll = card.querySelector('[data-action="retry-all"]');
  retryAll.hidden = failing.length === 0;
  retryAll.disabled = !endpoint.enabled;
  retryAll.setAttribute("aria-label", `Retry all failing deliveries of ${endpoint.id} now`);

  const shown = failing.slice(0, FAILING_SHOWN);
  const key = JSON.stringify([endpoint.enabled, failing.length, shown]);
  if (key === hook.failingKey) return failing.length;
  hook.failingKey = key;
  // A re-render keeps the keyboard where it was: on the same delivery's Retry button.
  const focused = document.activeElement?.dataset?.retry;
  const items = shown.map((delivery) => deliveryItem(hook, endpoint, delivery));
  if (failing.length > shown.length) {
    const more = document.createElement("li");
    more.className = "muted";
    more.textContent = `and ${failing.length - shown.length} more: GET /admin/webhooks/${endpoint.id}/deliveries?status=failed`;
    items.push(more);
  }
  field(card, "failing").replaceChildren(...items);
  if (focused) card.querySelector(`[data-retry="${CSS.escape(focused)}"]`)?.focus();
  return failing.length;
}

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
    failing += renderWebhook(hook, endpoint, logs[i]);
  });
  $("wh-count").textContent =
    endpoints.length === 0
      ? ""
      : `(${endpoints.length} ${endpoints.length === 1 ? "endpoint" : "endpoints"}, ${failing} failing)`;
}

async function retryDelivery(hook, endpoint, delivery, button) {
  button.disabled = true;
  const what = `${delivery.type} of ${delivery.reservationId}`;
  try {
    const path = `/admin/webhooks/${encodeURIComponent(endpoint.id)}/deliveries/${encodeURIComponent(delivery.id)}/retry`;
    const answer = await admin("POST", path);
    if (answer.ok) {
      say(hook, "ok", `Retry queued: ${what}, it is tried now.`);
      hook.retries.set(delivery.id, { what, attempts: delivery.attempts });
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
async function retryAll(hook, button) {
  button.disabled = true;
  try {
    const answer = await admin("POST", `/admin/webhooks/${encodeURIComponent(hook.id)}/retry`);
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
    run.skusChecked === undefined ? null : `${run.skusChecked} SKUs checked`,
    differences === undefined ? null : `${differences} differences`,
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
    const [skus, letters, runs, webhooks, read] = await Promise.all([
      admin("GET", "/admin/skus"),
      admin("GET", "/admin/dead-letters"),
      admin("GET", "/admin/reconcile/runs?limit=1"),
      askWebhooks ? loadWebhooks() : null,
      readCounters(),
    ]);
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
    if (letters.ok) renderLetters(letters.json.deadLetters);
    if (webhooks) {
      renderWebhooks(webhooks);
      webhooksAt = started + WEBHOOKS_MS;
    }
    if (askWebhooks) await window.dashboardConsole?.refreshConsole();
    $("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    $("board-error").textContent = `Gateway unreachable: ${error}`;
  }
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
  lastLetters = "";
  $("skus").replaceChildren();
  hooks.clear();
  webhooksAt = 0;
  fastWebhooksUntil = 0;
  $("webhooks").replaceChildren();
  window.dashboardConsole?.forgetConsole();
  showLogin();
});

$("wh-origin").textContent = location.origin;

if (sessionStorage.getItem(TOKEN_KEY)) refresh();
else showLogin();
