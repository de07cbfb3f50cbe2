// Operator dashboard: polls the admin API every 2 s. The admin token lives in sessionStorage only
// (this tab), and goes only to this origin's /admin/* routes.

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "flashgate.adminToken";
const REFRESH_MS = 2000;
const HISTORY = 60; // samples kept per SKU for the sparkline (two minutes)

const cards = new Map(); // sku -> card element
const snapshots = new Map(); // sku -> [{ t, reserved }]
let timer = 0;
let lastLetters = "";

async function admin(method, path) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const response = await fetch(path, { method, headers: { authorization: `Bearer ${token}` } });
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

/** Net units reserved per second between successive snapshots of the stock (held + sold). */
function rates(sku, stock, now) {
  const samples = snapshots.get(sku) ?? [];
  samples.push({ t: now, reserved: stock.held + stock.sold });
  while (samples.length > HISTORY + 1) samples.shift();
  snapshots.set(sku, samples);
  const out = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i].t - samples[i - 1].t) / 1000;
    out.push(dt > 0 ? Math.max(0, samples[i].reserved - samples[i - 1].reserved) / dt : 0);
  }
  return out;
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
  const seed = draw.seed ? ` · seed ${draw.seed}` : " · seed secret until decided";
  return `${draw.openingWindowMs} ms window · ${draw.entrants} entrants · ${phase} · seed hash ${draw.seedHash}${seed}`;
}

function renderSku(view, now) {
  const card = cardFor(view.sku);
  const { stock, orders } = view;
  field(card, "name").textContent = view.name;
  field(card, "sku").textContent = view.sku;
  // A SKU on sale with nothing left is sold out, whatever its configured status says.
  const status = view.status === "on_sale" && stock.available === 0 ? "sold_out" : view.status;
  field(card, "status").textContent = status.replace("_", " ");
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
  if (draw) field(card, "draw").textContent = drawText(draw, now);
  field(card, "mirror").textContent = mirrorText(view);
  const values = rates(view.sku, stock, now);
  drawSpark(field(card, "spark"), values);
  const last = values.at(-1) ?? 0;
  field(card, "rate").textContent = `now ${last.toFixed(1)}/s · peak ${Math.max(0, ...values).toFixed(1)}/s`;
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
    const [skus, letters, runs] = await Promise.all([
      admin("GET", "/admin/skus"),
      admin("GET", "/admin/dead-letters"),
      admin("GET", "/admin/reconcile/runs?limit=1"),
    ]);
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
      for (const view of skus.json.skus) renderSku(view, now);
      $("no-skus").hidden = skus.json.skus.length > 0;
    }
    if (letters.ok) renderLetters(letters.json.deadLetters);
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
  showLogin();
});

if (sessionStorage.getItem(TOKEN_KEY)) refresh();
else showLogin();
