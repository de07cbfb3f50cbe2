// Demo storefront: a shopper buys through the public API exactly like any client would.
// The shopper JWT comes from the dev-only `POST /dev/jwt`, payments from the dev-only `POST /dev/pay`
// (signed on the server); no secret ever reaches this page.

// Types for the checker (`npm run check`: tsc with checkJs over public/tsconfig.storefront.json); the
// API's shapes are its answers' (docs/API.md, src/routes/contract-schemas.ts), the fields this page reads.

/**
 * @typedef {"held" | "paid" | "expired" | "cancelled" | "refund_required"} ReservationStatus
 * @typedef {{ code: string, message: string, details?: ErrorDetails }} ApiError
 * @typedef {{ perUserLimit?: number, held?: number, requested?: number, available?: number,
 *   phase?: "scheduled" | "ended" | "paused", opensAt?: string, endedAt?: string, reason?: string,
 *   retryAfterSeconds?: number, draw?: DrawPlace, variants?: Record<string, number> }} ErrorDetails
 * @typedef {{ entryId: string, position: number, entrants: number }} DrawPlace
 * @typedef {{ name: string | null, startsAt: string | null }} AccessTier
 * @typedef {{ sku: string, name: string, status: "on_sale" | "paused", available: number,
 *   startsAt: string | null, endsAt: string | null, perUserLimit: number, price: number | null,
 *   currency: string, openingWindowMs?: number, phase?: "scheduled" | "open" | "ended" | "paused",
 *   held: number, waiting: number, access?: { name: string, startsAt: string }[], variants?: Size[] }} PublicSku
 * @typedef {{ id: string, name: string, available: number, held: number }} Size
 * @typedef {{ sku: string, openingWindowMs: number, seedHash: string, seed: string | null,
 *   entrants: number, decidedAt: string | null, opensAt: string, closesAt: string }} Draw
 * @typedef {{ token: string, userId: string, expiresAt: string }} DevJwt
 * @typedef {{ token: string, expiresAt: string }} PurchaseToken
 * @typedef {{ challenge: string, bits: number, expiresAt: string }} PowChallenge
 * @typedef {{ reservationId: string, sku: string, quantity: number, status: ReservationStatus,
 *   expiresAt: string | null, links: { self: string }, draw?: DrawPlace, variant?: string | null }} Reservation
 * @typedef {{ entry: "hold" | "paid" | "refund_required" | "cancelled" | "expired", index: number,
 *   proof: string }} Receipt
 * @typedef {Reservation & { order: { persisted: boolean, status: ReservationStatus | null },
 *   receipts?: Receipt[], salt?: string }} ReservationDetail
 * @typedef {{ reservations: Reservation[] }} ReservationList
 * @typedef {{ waitlistId: string, position: number }} WaitlistEntry
 * @typedef {{ waitlistId: string, position: number, quantity: number, unitsAhead: number, held: number,
 *   joinedAt: string }} WaitlistPlace
 * @typedef {{ received: true, reservationStatus: string, outcome: "applied" | "refund_required" }} PaymentAck
 */
/**
 * An API answer: `json` is the body of type T when `ok` (the route's success shape), an ErrorBody
 * otherwise, and null when the body was not JSON.
 * @template [T=unknown]
 * @typedef {{ status: number, ok: boolean, json: T, retryAfter: number }} Answer
 */
/**
 * A reservation as the page keeps it: what the API said, and whether it was made here since the
 * last list (`local`).
 * @typedef {Reservation & { order?: ReservationDetail["order"] }} SeenReservation
 * @typedef {SeenReservation & { local: boolean }} Hold
 */
/**
 * This shopper's place in a SKU's line: the last GET /api/skus/:sku/waitlist (or the join's answer),
 * when it was read, the holds that existed before (`known`: not the line's grant), and the reads since
 * the entry left the line (`gone`).
 * @typedef {{ sku: string, quantity: number, position: number, unitsAhead?: number, held?: number,
 *   readAt: number, known: Set<string>, gone: number }} LineEntry
 * @typedef {{ sku: string, won: boolean, quantity: number, code: string | undefined } & DrawPlace} DrawResult
 * @typedef {{ open: boolean, text: string, note?: string }} SaleWindow
 */
/**
 * Cloudflare Turnstile's script, once loaded (loadTurnstile).
 * @typedef {{ render(target: string, options: { sitekey: string }): void, reset(target: string): void,
 *   getResponse(target: string): string | undefined }} Turnstile
 * @typedef {Window & typeof globalThis & { turnstile?: Turnstile }} PageWindow
 */

/**
 * The page's elements that are more than an HTMLElement, by id (index.html).
 * @typedef {{ user: HTMLInputElement, sku: HTMLInputElement, quantity: HTMLInputElement,
 *   "access-code": HTMLInputElement, buy: HTMLButtonElement, "join-waitlist": HTMLButtonElement,
 *   "leave-waitlist": HTMLButtonElement, pay: HTMLButtonElement, "pay-fail": HTMLButtonElement,
 *   cancel: HTMLButtonElement, "pow-cancel": HTMLButtonElement, "size-2": HTMLSelectElement,
 *   "size-3": HTMLSelectElement }} Elements
 */
/**
 * The element with this id: index.html has every id this script asks for.
 * @template {string} K
 * @param {K} id
 * @returns {K extends keyof Elements ? Elements[K] : HTMLElement}
 */
const $ = (id) => /** @type {K extends keyof Elements ? Elements[K] : HTMLElement} */ (document.getElementById(id));

const state = {
  /** @type {string | null} */
  jwt: null,
  /** @type {string | null} */
  userId: null,
  /** @type {string | null} */
  sku: null,
  /** @type {PublicSku | null} */
  view: null,
  /** @type {ReservationDetail | null} */
  reservation: null,
  pollTimer: 0,
  busy: false,
  /**
   * This shopper's place in the line for this SKU, as GET /api/skus/:sku/waitlist last gave it:
   * { sku, waitlistId, position, quantity, unitsAhead, held, joinedAt, readAt, known, gone }. `known`:
   * the holds that existed before (not the line's grant); `gone`: reads since the entry left the line.
   * @type {LineEntry | null}
   */
  waitlist: null,
  waitlistTimer: 0,
  /** Reservation id of a hold that came from the waitlist. @type {string | null} */
  grantedId: null,
  /** The SKU's opening draw (GET /api/skus/:sku/draw), when it has a window. @type {Draw | null} */
  draw: null,
  /** Where the last reservation came in the opening draw. @type {(DrawPlace & { id: string }) | null} */
  drawn: null,
  /** The last opening draw this shopper took part in, won or lost. @type {DrawResult | null} */
  drawResult: null,
  /** 503 answers retried so far (wrangler dev's proxy, or BUSY): the page says how many. */
  retried503: 0,
  /**
   * Every reservation of this shopper the page knows, by id: those D1 lists (GET /api/me/reservations)
   * and those made here that it does not list yet. Each held one can be paid or cancelled.
   * @type {Map<string, Hold>}
   */
  holds: new Map(),
  /** SKUs this page showed on sale that then answered 404: archived, ended for good. @type {Set<string>} */
  gone: new Set(),
  /** The status line says the shopper's place in the line: it follows the place the panel shows. */
  lineSaid: false,
  /** The sizes each reservation made here asked for, in order (its hold card says which choice it got). @type {Map<string, string[]>} */
  asked: new Map(),
};

/** The signed-in shopper is remembered in this tab, so a reload keeps their holds on screen. */
const SHOPPER_KEY = "flashgate.shopper";
/**
 * The lines each shopper joined from this tab ({ userId: [sku, …] }): after a reload or a sign-in the
 * page asks for the shopper's place only in those. Asking everyone would answer 404 for every shopper
 * not waiting, which the browser logs as an error on each sign-in (issue #50).
 */
const LINES_KEY = "flashgate.lines";

const MAX_ATTEMPTS = 4;
/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One API call. A 503 is retried with the very same request: `wrangler dev`'s proxy answers
 * "503 Your worker restarted mid-request" under load (cloudflare/workers-sdk#14641) and the stock
 * object answers 503 BUSY when overloaded; a reservation is idempotent by its purchase token, so
 * sending the same token again returns the same hold, never a second one.
 */
/**
 * @param {string} method
 * @param {string} path
 * @param {{ body?: unknown, auth?: boolean, extra?: Record<string, string> }} [options]
 * @returns {Promise<Answer>}
 */
async function api(method, path, { body, auth = false, extra = {} } = {}) {
  // Every segment built here is encodeURIComponent'd; "." and ".." are resolved away by the URL
  // standard even so (/api/skus/../waitlist is /api/waitlist): such a path is not sent.
  const built = path.split("?")[0];
  if (new URL(path, location.origin).pathname !== built) {
    const message = `${built} is not sent: "." or ".." cannot be a path segment.`;
    return { status: 0, ok: false, json: { error: { code: "UNSENDABLE_PATH", message } }, retryAfter: 0 };
  }
  /** @type {Record<string, string>} */
  const headers = { ...extra };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (auth && state.jwt) headers.authorization = `Bearer ${state.jwt}`;
  const init = { method, headers, body: body === undefined ? undefined : JSON.stringify(body) };
  let response = await fetch(path, init);
  // A shopper's action (not a poll) that the rate limit refused is sent again once, after the wait the
  // answer names: the page says so meanwhile. Every one of these requests is safe to repeat.
  if (response.status === 429 && method !== "GET") {
    const wait = Math.min(Number(response.headers.get("retry-after")) || 10, 15);
    await response.body?.cancel();
    say(`The shop asked this browser to slow down: trying again in ${wait} s…`);
    await sleep(wait * 1000);
    response = await fetch(path, init);
  }
  for (let attempt = 1; response.status === 503 && attempt < MAX_ATTEMPTS; attempt++) {
    state.retried503++;
    document.body.dataset.retried503 = String(state.retried503);
    const retryAfter = Number(response.headers.get("retry-after"));
    await response.body?.cancel();
    await sleep(retryAfter > 0 ? Math.min(retryAfter, 5) * 1000 : 250 * 2 ** attempt);
    response = await fetch(path, init);
  }
  let json = null;
  try {
    json = await response.json();
  } catch {
    // not JSON
  }
  return { status: response.status, ok: response.ok, json, retryAfter: Number(response.headers.get("retry-after")) };
}

/**
 * A price in minor units of `currency` as this browser writes money ("€25.00", "¥2,500"), with the
 * currency's own decimals (Intl). An unknown code is shown as the number and the code.
 */
/**
 * @param {number} minor
 * @param {string | undefined} currency
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

/** A local time a shopper reads ("20:15:04"). */
/** @param {string | number} iso */
const clock = (iso) => new Date(iso).toLocaleTimeString();

/**
 * An answer in a shopper's words: what happened and what to do now, from the error's code and its
 * figures (`error.details`), never the raw code.
 */
/** @param {Answer} answer */
function errorText(answer) {
  const error = apiError(answer);
  const d = error?.details ?? {};
  switch (error?.code) {
    case "LIMIT_EXCEEDED": {
      if (d.perUserLimit === undefined) return "That would be more than a shopper may buy of this item.";
      const room = Math.max(0, d.perUserLimit - (d.held ?? 0));
      return room > 0
        ? `You already have ${d.held} of the ${d.perUserLimit} allowed per shopper: you can add ${room} more, not ${d.requested}.`
        : `You already have the ${d.perUserLimit} allowed per shopper. Cancel a hold in "Your holds and orders" to choose again.`;
    }
    case "SOLD_OUT":
      return "Sold out: every unit is taken. Join the waitlist to get one that comes back.";
    case "INSUFFICIENT_STOCK":
      return d.available === undefined
        ? "Fewer are left than you asked for: lower the quantity."
        : `Only ${d.available} left: lower the quantity to ${d.available} or fewer.`;
    case "ACCESS_CODE_INVALID":
      return "This access code admits nobody now: it is unknown, its tier has not opened yet, or another shopper has already used it. Check the code and try again.";
    case "SALE_NOT_ACTIVE":
      if (d.phase === "scheduled" && state.view && earlyAccess(state.view, Date.now()).open.length > 0)
        return `Early access is open only to members and access-code holders: enter your code, or buy when everyone can, at ${clock(d.opensAt ?? state.view.startsAt ?? Date.now())}.`;
      if (d.phase === "scheduled")
        return d.opensAt
          ? `The sale has not opened yet: it opens at ${clock(d.opensAt)}. Try again then.`
          : "The sale has not opened yet. Try again later.";
      // An archived sale, or one with no end time, ends with no `endedAt`.
      if (d.phase === "ended") return d.endedAt ? `The sale ended at ${clock(d.endedAt)}.` : "The sale has ended.";
      return "The shop has paused this sale for a moment. Try again shortly.";
    case "RATE_LIMITED":
      return `Too many tries in a short time: wait ${d.retryAfterSeconds ?? 10} s, then try again.`;
    case "BUSY":
      return `The shop is very busy right now: try again in ${d.retryAfterSeconds ?? 1} s (your place is kept).`;
    case "TOKEN_EXPIRED":
    case "TOKEN_INVALID":
      return "Your turn to buy timed out: press Buy again.";
    case "STOCK_AVAILABLE":
      return "Units are available again: buy them instead.";
    case "CHALLENGE_REQUIRED":
    case "CHALLENGE_FAILED":
      return "The check against bots did not pass: press Buy to try it again.";
    case "RESERVATION_NOT_FOUND":
      return "This hold is no longer there (it may have lapsed).";
    case "INVALID_STATE":
      return "This hold can no longer be changed: it is paid, cancelled or lapsed.";
    case "UNAUTHENTICATED":
      // details.reason (v1.3) says why the JWT was refused; an expired one is the usual case.
      if (d.reason === "missing_token") return "You are not signed in: sign in first (step 1).";
      if (d.reason && d.reason !== "expired") return "Your sign-in was not accepted: sign in again.";
      return "Your sign-in has expired: sign in again.";
    case "SKU_NOT_FOUND":
      return "This sale has ended and is no longer available.";
    case "IDEMPOTENCY_MISMATCH":
      return "That purchase was already made with another quantity: press Buy again.";
    default:
      return answer.status >= 500 || answer.status === 0
        ? "The shop could not answer just now: try again in a moment."
        : "That did not work: try again.";
  }
}

/**
 * The error an answer carries, if any.
 * @param {Answer} answer
 * @returns {ApiError | undefined}
 */
function apiError(answer) {
  return /** @type {{ error?: ApiError } | null} */ (answer.json)?.error;
}

/**
 * @param {string} text
 * @param {"info" | "ok" | "error"} [kind]
 */
function say(text, kind = "info") {
  state.lineSaid = false;
  show(text, kind);
}

/**
 * @param {string} text
 * @param {"info" | "ok" | "error"} kind
 */
function show(text, kind) {
  const message = $("message");
  if (message.textContent !== text) message.textContent = text;
  message.dataset.kind = kind;
}

/**
 * The status line is sticky at the bottom of the screen: its height is kept in --status-line, the
 * page's scroll-padding-bottom, so what the page or the browser scrolls into view (a focused button,
 * the line's place after Join) stops above it. At the end of the page it sits below the last card.
 */
function trackStatusLine() {
  const bar = $("message");
  const set = () => document.documentElement.style.setProperty("--status-line", `${bar.offsetHeight + 8}px`);
  new ResizeObserver(set).observe(bar);
  set();
}

/** @param {number} ms */
function duration(ms) {
  const total = Math.max(0, Math.round(ms / 1000));
  const h = Math.floor(total / 3600);
  const m = Math.floor((total % 3600) / 60);
  const s = total % 60;
  const mm = String(m).padStart(2, "0");
  const ss = String(s).padStart(2, "0");
  return h > 0 ? `${h}:${mm}:${ss}` : `${m}:${ss}`;
}

// 1. The shopper -------------------------------------------------------------------------------

/** @param {string} userId */
async function signIn(userId) {
  const answer = /** @type {Answer<DevJwt>} */ (await api("POST", "/dev/jwt", { body: { userId } }));
  if (answer.status === 404) {
    $("dev-off").hidden = false;
    say("Dev tools are off: no shopper JWT can be minted here.", "error");
    return;
  }
  if (!answer.ok) {
    say(`Sign-in failed: ${errorText(answer)}`, "error");
    return;
  }
  state.jwt = answer.json.token;
  state.userId = answer.json.userId;
  sessionStorage.setItem(SHOPPER_KEY, state.userId);
  $("user").value = state.userId;
  state.reservation = null;
  state.grantedId = null;
  state.holds.clear();
  holdsKey = "";
  stopWaitlist();
  $("reservation").hidden = true;
  $("who").textContent =
    `Signed in as ${state.userId} (JWT valid until ${new Date(answer.json.expiresAt).toLocaleTimeString()}).`;
  $("who").classList.remove("muted");
  say(`Hello ${state.userId}.`);
  renderSku();
  await refreshOrders();
  await restoreLine();
}

// 2. The sale ----------------------------------------------------------------------------------

async function pollSku() {
  if (!state.sku) return;
  const sku = state.sku;
  const answer = /** @type {Answer<PublicSku>} */ (await api("GET", `/api/skus/${encodeURIComponent(sku)}`));
  if (state.sku !== sku) return;
  if (answer.status === 404) {
    // A sale this page showed that now answers 404 was archived (API.md v1.3): it has ended for good.
    if (state.view?.sku === sku) state.gone.add(sku);
    state.view = null;
  } else if (answer.ok) {
    state.view = answer.json;
    state.gone.delete(sku);
  }
  // Fair opening: the draw's committed seed hash (and, once decided, its seed). The last one read
  // stays until a new one arrives: a Buy clicked while this read is under way still sees the window.
  if ((state.view?.openingWindowMs ?? 0) > 0) {
    const draw = /** @type {Answer<Draw>} */ (await api("GET", `/api/skus/${encodeURIComponent(sku)}/draw`));
    if (draw.ok) state.draw = draw.json;
  } else {
    state.draw = null;
  }
  renderSku();
}

/**
 * The fair opening's line: a countdown to the opening, then the window, then the draw.
 * @param {Draw | null} draw
 * @param {number} now
 */
function openingText(draw, now) {
  if (!draw) return null;
  const opens = Date.parse(draw.opensAt);
  const closes = Date.parse(draw.closesAt);
  const seconds = (draw.openingWindowMs / 1000).toFixed(draw.openingWindowMs % 1000 === 0 ? 0 : 1);
  if (now < opens) {
    return `Fair opening in ${duration(opens - now)}: every request in the first ${seconds} s takes part in one draw, in random order (seed hash ${draw.seedHash.slice(0, 16)}…). Arriving first gives no advantage.`;
  }
  if (!draw.decidedAt) {
    return now < closes
      ? `Opening window: requests now enter the draw (closes in ${duration(closes - now)}).`
      : "The opening draw is being decided…";
  }
  return `Opening draw decided: ${draw.entrants} entrants. Seed ${(draw.seed ?? "").slice(0, 16)}… (check it against the hash published before).`;
}

/**
 * The SKU's early access tiers (API.md v1.3 "Early access") at `now`: the names of those opened, and
 * the next opening, a tier's or the public start's (`name` null).
 * @param {{ access?: { name: string, startsAt: string }[], startsAt: string | null }} view
 * @param {number} now
 * @returns {{ open: string[], next: { name: string | null, at: number } | null }}
 */
function earlyAccess(view, now) {
  const tiers = (view.access ?? []).map((t) => ({ name: t.name, at: Date.parse(t.startsAt) }));
  const publicAt = view.startsAt ? Date.parse(view.startsAt) : Number.NaN;
  /** @type {{ name: string | null, at: number }[]} */
  const upcoming = tiers.filter((t) => t.at > now);
  if (publicAt > now) upcoming.push({ name: null, at: publicAt });
  upcoming.sort((a, b) => a.at - b.at);
  return { open: tiers.filter((t) => t.at <= now).map((t) => t.name), next: upcoming[0] ?? null };
}

/**
 * Whether the access code field applies: the SKU has tiers and its public sale has not started.
 * @param {{ access?: { name: string, startsAt: string }[], startsAt: string | null }} view
 * @param {number} now
 */
function codesApply(view, now) {
  return (view.access ?? []).length > 0 && view.startsAt !== null && Date.parse(view.startsAt) > now;
}

/**
 * The tiers before the public start, each open or counting down to its opening, then "Everyone".
 * @param {{ access?: { name: string, startsAt: string }[], startsAt: string | null }} view
 * @param {number} now
 */
function renderTiers(view, now) {
  const shown = codesApply(view, now);
  $("tiers").hidden = !shown;
  const startsAt = view.startsAt;
  if (!shown || startsAt === null) return; // codesApply: startsAt is set

  const early = earlyAccess(view, now);
  $("tiers-now").textContent = early.open.length > 0 ? `· open now: ${early.open.join(", ")}` : "· none open yet";
  const rows = [...(view.access ?? []), { name: null, startsAt }].map((tier) => {
    const at = Date.parse(tier.startsAt);
    const li = document.createElement("li");
    li.dataset.tier = tier.name ?? "everyone";
    li.dataset.state = at <= now ? "open" : at === early.next?.at ? "next" : "later";
    const name = document.createElement("b");
    name.textContent = tier.name ?? "Everyone";
    const when =
      at <= now
        ? ` open since ${clock(tier.startsAt)}`
        : ` opens in ${duration(at - now)} (at ${clock(tier.startsAt)})`;
    li.append(name, when);
    return li;
  });
  $("tier-list").replaceChildren(...rows);
}

/**
 * Whether the sale can be bought now, its line (a countdown), and what that means for the shopper
 * when it cannot (`note`): paused, not open yet, or over.
 * @param {PublicSku} view
 * @param {number} now
 * @returns {SaleWindow}
 */
function saleWindow(view, now) {
  const held = "Holds you already have can still be paid until they lapse.";
  if (view.status !== "on_sale" || view.phase === "paused") {
    return {
      open: false,
      text: "Sale paused by the shop.",
      note: `You cannot buy it right now: the shop has paused the sale and may resume it at any moment. ${held}`,
    };
  }
  if (view.startsAt && Date.parse(view.startsAt) > now) {
    const opens = new Date(view.startsAt).toLocaleString();
    const everyone = duration(Date.parse(view.startsAt) - now);
    const early = earlyAccess(view, now);
    if (early.open.length > 0) {
      return {
        open: true,
        text: `Early access open (${early.open.join(", ")}) · everyone in ${everyone}`,
        note: `Only members and access-code holders can buy now: enter your code below (members need none). Everyone can buy from ${opens} (your time).`,
      };
    }
    if (early.next?.name) {
      return {
        open: false,
        text: `Early access (${early.next.name}) opens in ${duration(early.next.at - now)} · everyone in ${everyone}`,
        note: `Not open yet: Buy turns on when the first early access tier opens, at ${new Date(early.next.at).toLocaleString()} (your time), for its members and code holders.`,
      };
    }
    return {
      open: false,
      text: `Sale starts in ${duration(Date.parse(view.startsAt) - now)}`,
      note: `Not open yet: Buy turns on when the sale starts, at ${opens} (your time). Nothing can be reserved before.`,
    };
  }
  if ((view.endsAt && Date.parse(view.endsAt) <= now) || view.phase === "ended") {
    return {
      open: false,
      text: view.endsAt ? `Sale ended at ${clock(view.endsAt)}.` : "Sale ended.",
      note: `This sale is over: nothing more can be bought. ${held}`,
    };
  }
  if (view.endsAt) return { open: true, text: `On sale · ends in ${duration(Date.parse(view.endsAt) - now)}` };
  return { open: true, text: "On sale now." };
}

function renderSku() {
  const view = state.view;
  $("sku-missing").hidden = view !== null || !state.sku;
  $("sku-view").hidden = view === null;
  if (!view) {
    const gone = state.sku !== null && state.gone.has(state.sku);
    $("sku-gone").hidden = !gone;
    $("sku-unknown").hidden = gone;
    $("sku-missing-id").textContent = state.sku ?? "";
    $("sku-missing-curl").textContent =
      `curl -X PUT ${location.origin}/admin/skus/${state.sku} -H 'Authorization: Bearer dev-admin-token' \\\n` +
      `  -H 'content-type: application/json' -d '{"name":"Limited tee","totalStock":100,"perUserLimit":2}'`;
    return;
  }
  const sale = saleWindow(view, Date.now());
  $("sku-name").textContent = `${view.name} (${view.sku})`;
  $("available").textContent = String(view.available);
  $("available").classList.toggle("gone", view.available === 0);
  $("held-note").textContent = view.held > 0 ? `· ${view.held} held by shoppers (unpaid, may come back)` : "";
  $("countdown").textContent = view.available === 0 && sale.open ? "Sold out." : sale.text;
  $("sale-note").hidden = !sale.note;
  $("sale-note").textContent = sale.note ?? "";
  const price = view.price ?? null; // absent from an older server's answer
  $("price").hidden = price === null;
  $("price").textContent = price === null ? "" : `${money(price, view.currency)} each`;
  const opening = openingText(state.draw, Date.now());
  $("opening").hidden = opening === null;
  $("opening").textContent = opening ?? "";
  renderTiers(view, Date.now());
  renderSizes(view);
  const codes = codesApply(view, Date.now());
  $("access").hidden = !codes;
  $("access-help").hidden = !codes;
  if (!codes) showAccessError(null);
  renderDrawResult(view);
  $("sku-meta").textContent = `At most ${view.perUserLimit} per shopper.`;
  // What this shopper holds or bought of this SKU: at the limit, Buy is off and the page says why.
  const mine = holdingOf(view.sku);
  const room = Math.max(0, view.perUserLimit - mine);
  $("quantity").max = String(view.perUserLimit);
  const atLimit = state.jwt !== null && room === 0;
  // The sizes picked are all gone while others have units: a Buy would only be refused SOLD_OUT.
  const picked = chosenSizes();
  const pickedGone =
    view.available > 0 && picked.length > 0 && picked.every((id) => (sizeOf(id)?.available ?? 0) === 0);
  $("buy").disabled = state.busy || !state.jwt || !sale.open || view.available === 0 || atLimit || pickedGone;
  // Sold out, the line is what is left; the limit refuses it too (409 LIMIT_EXCEEDED), so it is not offered.
  const soldOut = sale.open && view.available === 0;
  let note = "";
  if (!state.jwt) note = "Sign in first (step 1) to buy.";
  else if (atLimit && holdingOf(view.sku, "held") === 0)
    note = `You have bought the ${view.perUserLimit} allowed per shopper${soldOut ? ", so the waitlist cannot take you either" : ""}.`;
  else if (atLimit && soldOut)
    note = `You hold your limit, the ${view.perUserLimit} allowed per shopper (held or paid), so the waitlist cannot take you. To wait for more, cancel a hold in "Your holds and orders".`;
  else if (atLimit)
    note = `You have the ${view.perUserLimit} allowed per shopper (held or paid). To buy again, cancel a hold in "Your holds and orders".`;
  else if (pickedGone)
    note = `${picked.map(sizeName).join(" and ")} ${picked.length === 1 ? "is" : "are"} sold out: pick another size to buy.`;
  else if (mine > 0) note = `You have ${mine} of the ${view.perUserLimit} allowed: you can add ${room} more.`;
  $("buy-note").hidden = note === "";
  $("buy-note").textContent = note;
  $("buy-note").dataset.kind = atLimit ? "limit" : "";
  renderWaitlist(view, sale, atLimit);
}

// 2a. Sizes: API.md v1.4 "Sizes (variants)" -------------------------------------------------------

/** The choices after the first: the selects' order is the order of preference sent. */
const FALLBACKS = /** @type {const} */ (["size-2", "size-3"]);

/**
 * A size as the picker says it: "EU 42 (3 left)", "EU 43 (sold out)".
 * @param {Size} size
 */
const sizeLabel = (size) => `${size.name} (${size.available > 0 ? `${size.available} left` : "sold out"})`;

/**
 * The size picker of a SKU with sizes: one radio a size for the first choice, two selects for the
 * sizes to take if it is gone. It is kept as it is between polls (the focus stays where it is), only
 * its figures change. A size sold out is greyed and cannot be picked, unless every size is: then the
 * shopper picks the sizes they wait for in the line.
 * @param {PublicSku} view
 */
function renderSizes(view) {
  const sizes = view.variants ?? [];
  $("sizes").hidden = sizes.length === 0;
  if (sizes.length === 0) return;
  const allGone = view.available === 0;
  const box = $("size-options");
  const key = `${view.sku}\n${sizes.map((s) => s.id).join("\n")}`;
  if (box.dataset.key !== key) {
    box.dataset.key = key;
    delete box.dataset.picked;
    box.replaceChildren(
      ...sizes.map((size) => {
        const label = document.createElement("label");
        label.className = "size";
        const radio = document.createElement("input");
        radio.type = "radio";
        radio.name = "size";
        radio.value = size.id;
        radio.addEventListener("change", () => {
          box.dataset.picked = "true";
          renderSku();
        });
        label.append(radio, document.createElement("span"));
        return label;
      }),
    );
    for (const id of FALLBACKS) $(id).replaceChildren();
  }
  const radios = /** @type {HTMLInputElement[]} */ ([...box.querySelectorAll('input[name="size"]')]);
  sizes.forEach((size, i) => {
    const radio = radios[i];
    if (!radio) return;
    const label = /** @type {HTMLElement} */ (radio.nextElementSibling);
    // Written only when it changes: the page renders every 250 ms, and a screen reader hears each change.
    if (label.textContent !== sizeLabel(size)) label.textContent = sizeLabel(size);
    radio.disabled = size.available === 0 && !allGone;
    radio.closest("label")?.classList.toggle("gone", size.available === 0);
  });
  // The first choice: the shopper's own pick stays when it sells out (greyed: a hold then takes a later
  // choice, or the line is offered), never swapped for a size they did not choose; the page's default
  // moves to the first size with units.
  let first = radios.find((r) => r.checked);
  if (!first || (first.disabled && box.dataset.picked !== "true")) {
    first = radios.find((r) => !r.disabled);
    if (first) first.checked = true;
  }
  const taken = [first?.value];
  for (const id of FALLBACKS) {
    const select = $(id);
    const was = select.value;
    if (select.options.length !== sizes.length + 1) {
      const none = document.createElement("option");
      none.value = "";
      none.textContent = "none";
      select.replaceChildren(none, ...sizes.map(() => document.createElement("option")));
    }
    sizes.forEach((size, i) => {
      const option = /** @type {HTMLOptionElement} */ (select.options[i + 1]);
      option.value = size.id;
      if (option.textContent !== sizeLabel(size)) option.textContent = sizeLabel(size);
      option.disabled = taken.includes(size.id) || (size.available === 0 && !allGone);
    });
    const keep = sizes.find((s) => s.id === was);
    const value = keep && !taken.includes(was) && !(keep.available === 0 && !allGone) ? was : "";
    if (select.value !== value) select.value = value;
    // A later choice needs the one before it: the third is off until a second is picked.
    select.disabled = id === "size-3" && !taken[1];
    if (id === "size-3" && select.disabled) select.value = "";
    taken.push(select.value || undefined);
  }
}

/** The sizes picked, in order of preference (none for a SKU without sizes). */
function chosenSizes() {
  if ($("sizes").hidden) return [];
  const first = /** @type {HTMLInputElement | null} */ ($("size-options").querySelector('input[name="size"]:checked'));
  const out = [first?.value ?? "", ...FALLBACKS.map((id) => $(id).value)].filter(Boolean);
  return [...new Set(out)];
}

/** The body's `variants`, when the SKU has sizes. */
function sizesBody() {
  const sizes = chosenSizes();
  return sizes.length > 0 ? { variants: sizes } : {};
}

/**
 * A size of the public view, by id.
 * @param {string} id
 */
function sizeOf(id) {
  return state.view?.variants?.find((s) => s.id === id);
}

/**
 * A size's name, from the public view (its id when the view does not list it).
 * @param {string} id
 */
function sizeName(id) {
  return sizeOf(id)?.name ?? id;
}

/**
 * The hold card's size: its name, and which choice it was when the page asked for more than one.
 * @param {string} reservationId
 * @param {string} variant
 */
function heldSizeText(reservationId, variant) {
  const asked = state.asked.get(reservationId) ?? [];
  const at = asked.indexOf(variant);
  if (asked.length < 2 || at < 0) return sizeName(variant);
  if (at === 0) return `${sizeName(variant)} (your first choice)`;
  const gone = asked.slice(0, at).map(sizeName).join(" and ");
  return `${sizeName(variant)} (your ${at === 1 ? "second" : "third"} choice: ${gone} ${at === 1 ? "was" : "were"} gone)`;
}

/**
 * What a SOLD_OUT or INSUFFICIENT_STOCK said of each size listed: " Left: EU 42: 0, EU 43: 1."
 * @param {Record<string, number> | undefined} variants
 */
function sizesLeft(variants) {
  if (!variants) return "";
  const parts = Object.entries(variants).map(([id, n]) => `${sizeName(id)}: ${n}`);
  return parts.length > 0 ? ` Left of the sizes you picked: ${parts.join(", ")}.` : "";
}

/**
 * Units of `sku` this shopper holds or bought (held + paid), as the per-user limit counts them.
 * @param {string} sku
 * @param {ReservationStatus | null} [only]
 */
function holdingOf(sku, only = null) {
  let units = 0;
  for (const r of state.holds.values()) {
    const counted = only ? r.status === only : r.status === "held" || r.status === "paid";
    if (r.sku === sku && counted) units += r.quantity;
  }
  return units;
}

// 2b. The line (sold out): API.md v1.3 "The line, visible" ---------------------------------------

/** How often the page reads the shopper's place while waiting (each read counts against the rate limit). */
const LINE_POLL_MS = 2000;
/** Reads of GET /api/me/reservations, once the entry left the line, before the page stops looking for its grant (a minute: the order row comes by the queue, slower under load). */
const GRANT_LOOKS = 30;

/** "1 unit", "3 units". @param {number} n */
const units = (n) => `${n} ${n === 1 ? "unit" : "units"}`;

/**
 * The shopper's place as the status line says it: the very number the panel shows (API.md v1.3:
 * `position` 1 = next).
 * @param {LineEntry} entry
 */
function lineText(entry) {
  const next = entry.position === 1 ? ": you are next" : "";
  return `On the waitlist for ${units(entry.quantity)}: place ${entry.position} of those waiting${next}.`;
}

/**
 * The sold-out notice: the offer to join (with how many wait), or the shopper's place and Leave.
 * A shopper at the per-user limit is not offered the line, which would refuse them (the buy note
 * says they hold their limit).
 * @param {{ sku: string, available: number, waiting?: number, startsAt: string | null }} view
 * @param {{ open: boolean }} sale
 * @param {boolean} atLimit
 */
function renderWaitlist(view, sale, atLimit) {
  const joined = state.waitlist?.sku === view.sku ? state.waitlist : null;
  // The line opens with the public sale: early access sells, but takes no one into the line (403).
  const publicSale = !view.startsAt || Date.parse(view.startsAt) <= Date.now();
  const soldOut = sale.open && publicSale && view.available === 0;
  // A shopper who holds units of this SKU (the waitlist's grant among them) is not offered it again.
  const holding = state.reservation?.sku === view.sku && state.reservation.status === "held";
  $("waitlist").hidden = !joined && (holding || atLimit || !soldOut);
  $("join-waitlist").hidden = joined !== null;
  $("join-waitlist").disabled = state.busy || !state.jwt;
  $("join-waitlist").title = state.jwt ? "" : "Sign in first";
  $("leave-waitlist").hidden = joined === null || joined.gone > 0;
  $("leave-waitlist").disabled = state.busy;
  const waiting = view.waiting ?? 0;
  $("waiting-count").textContent =
    !joined && waiting > 0 ? `${waiting} ${waiting === 1 ? "shopper is" : "shoppers are"} in line now.` : "";
  const placed = joined !== null && joined.gone === 0 && joined.unitsAhead !== undefined;
  $("line").hidden = !placed;
  if (placed) {
    const before = joined.position - 1;
    $("line-position").textContent =
      `${joined.position} of those waiting${joined.position === 1 ? ": you are next" : ""}`;
    $("line-ahead").textContent =
      joined.unitsAhead === 0
        ? "nobody: the next units that come back are yours"
        : `${units(joined.unitsAhead ?? 0)} wanted by the ${before} ${before === 1 ? "shopper" : "shoppers"} before you`;
    $("line-held").textContent =
      joined.held === 0
        ? "none: no unit can come back right now"
        : `${units(joined.held ?? 0)}, unpaid: they come back to the line if they lapse or are cancelled`;
    $("line-updated").textContent = `Updated ${clock(joined.readAt)}; refreshed every ${LINE_POLL_MS / 1000} s.`;
  }
  // The status line said the place when the shopper joined: it moves with the panel's.
  if (state.lineSaid && joined && joined.gone === 0) show(lineText(joined), "ok");
  $("waitlist-status").textContent = !joined
    ? ""
    : joined.gone > 0
      ? "You are no longer waiting: looking for the hold the line granted you…"
      : `You are number ${joined.position} on the waitlist for ${joined.quantity}.`;
}

/** @param {number} quantity */
async function joinWaitlist(quantity) {
  state.busy = true;
  try {
    const sku = state.sku;
    if (!sku) return;
    const answer = /** @type {Answer<WaitlistEntry>} */ (
      await api("POST", `/api/skus/${encodeURIComponent(sku)}/waitlist`, {
        auth: true,
        body: { quantity, ...sizesBody() },
      })
    );
    if (answer.status === 409 && apiError(answer)?.code === "STOCK_AVAILABLE") {
      say("Units are available again: buy them instead.", "ok");
      return;
    }
    if (answer.status !== 202) {
      say(`Not on the waitlist. ${errorText(answer)}`, "error");
      return;
    }
    // Holds that exist now are not the one the waitlist will grant.
    const mine = /** @type {Answer<ReservationList>} */ (await api("GET", "/api/me/reservations", { auth: true }));
    const known = new Set(mine.ok ? mine.json.reservations.map((r) => r.reservationId) : []);
    const entry = { sku, quantity, known, gone: 0, readAt: Date.now(), ...answer.json };
    // The place is read before it is shown: the panel, the status line and the scroll below come in
    // one step, not a place from the join's answer first and the rest 2 s later.
    const place = /** @type {Answer<WaitlistPlace>} */ (
      await api("GET", `/api/skus/${encodeURIComponent(sku)}/waitlist`, { auth: true })
    );
    if (place.ok) Object.assign(entry, place.json, { readAt: Date.now() });
    state.waitlist = entry;
    rememberLine(sku, true);
    show(lineText(entry), "ok");
    state.lineSaid = true;
    if (place.ok) watchWaitlist();
    else await readLine(); // served at once, or the sale ended: readLine looks for the hold
  } finally {
    state.busy = false;
    renderSku();
  }
  // The place, what is ahead and Leave in view, above the status line (trackStatusLine).
  if (state.waitlist?.sku === state.sku) $("waitlist").scrollIntoView({ block: "nearest" });
}

/**
 * Whether this tab's shopper joined the line of `sku` here (and is not known to have left it).
 * @param {string} sku
 */
function joinedHere(sku) {
  return Boolean(state.userId && linesJoined()[state.userId]?.includes(sku));
}

/** @returns {Record<string, string[]>} */
function linesJoined() {
  try {
    const lines = JSON.parse(sessionStorage.getItem(LINES_KEY) ?? "{}");
    return lines && typeof lines === "object" ? lines : {};
  } catch {
    return {};
  }
}

/**
 * Notes that this tab's shopper joined the line of `sku` (`waiting`), or is no longer in it.
 * @param {string} sku
 * @param {boolean} waiting
 */
function rememberLine(sku, waiting) {
  if (!state.userId) return;
  const lines = linesJoined();
  const mine = (lines[state.userId] ?? []).filter((s) => s !== sku);
  if (waiting) mine.push(sku);
  if (mine.length > 0) lines[state.userId] = mine;
  else delete lines[state.userId];
  sessionStorage.setItem(LINES_KEY, JSON.stringify(lines));
}

/**
 * After a reload or a sign-in: the shopper's place in this SKU's line, if they joined it from this
 * tab (LINES_KEY); a shopper who never did is not asked about, so no 404 is logged.
 */
async function restoreLine() {
  const sku = state.sku;
  if (!state.jwt || !sku || state.waitlist?.sku === sku || !joinedHere(sku)) return;
  const answer = /** @type {Answer<WaitlistPlace>} */ (
    await api("GET", `/api/skus/${encodeURIComponent(sku)}/waitlist`, { auth: true })
  );
  if (answer.status === 404) rememberLine(sku, false); // served, left elsewhere, or the sale ended
  if (!answer.ok || state.sku !== sku || state.waitlist) return;
  const known = new Set(state.holds.keys());
  state.waitlist = { sku, known, gone: 0, readAt: Date.now(), ...answer.json };
  renderSku();
  watchWaitlist();
}

async function leaveWaitlist() {
  const entry = state.waitlist;
  if (!entry) return;
  state.busy = true;
  renderSku();
  try {
    const answer = await api("DELETE", `/api/skus/${encodeURIComponent(entry.sku)}/waitlist`, { auth: true });
    if (answer.ok || answer.status === 404) {
      rememberLine(entry.sku, false);
      stopWaitlist();
      say(
        answer.ok
          ? `You left the line for ${entry.sku}: nothing will be held for you, and those behind you moved up.`
          : "You were no longer in the line.",
        "ok",
      );
      return;
    }
    say(`Still in the line. ${errorText(answer)}`, "error");
  } finally {
    state.busy = false;
    renderSku();
  }
}

function stopWaitlist() {
  clearTimeout(state.waitlistTimer);
  state.waitlist = null;
}

function watchWaitlist() {
  clearTimeout(state.waitlistTimer);
  state.waitlistTimer = setTimeout(readLine, LINE_POLL_MS);
}

/**
 * Reads the shopper's place (GET /api/skus/:sku/waitlist) every 2 s. Once it answers 404 the entry has
 * left the line: served (its hold shows in GET /api/me/reservations once the order row is written) or
 * the sale ended; the page looks for the hold a few times, then says the shopper is no longer waiting.
 */
async function readLine() {
  const entry = state.waitlist;
  if (!entry) return;
  if (entry.gone === 0) {
    const answer = await api("GET", `/api/skus/${encodeURIComponent(entry.sku)}/waitlist`, { auth: true });
    if (state.waitlist !== entry) return;
    if (answer.status !== 404) {
      if (answer.ok) Object.assign(entry, answer.json, { readAt: Date.now() });
      renderSku();
      watchWaitlist(); // a 429 or a 5xx: the last place stays on screen, read again
      return;
    }
    entry.gone = 1;
    rememberLine(entry.sku, false);
  }
  const answer = /** @type {Answer<ReservationList>} */ (await api("GET", "/api/me/reservations", { auth: true }));
  if (state.waitlist !== entry) return;
  const granted = answer.ok
    ? answer.json.reservations.find(
        (r) => r.sku === entry.sku && r.status === "held" && !entry.known.has(r.reservationId),
      )
    : undefined;
  if (!granted) {
    if (entry.gone++ >= GRANT_LOOKS) {
      stopWaitlist();
      say("You are no longer in the line (the sale may have ended).", "error");
    } else {
      watchWaitlist();
    }
    renderSku();
    return;
  }
  stopWaitlist();
  state.grantedId = granted.reservationId;
  state.reservation = { ...granted, order: { persisted: false, status: null } };
  remember(granted);
  say(`The waitlist granted you a hold on ${granted.quantity}: pay before it lapses.`, "ok");
  renderReservation();
  renderSku();
  schedulePoll(0);
  await refreshOrders();
}

// 2c. Early access codes and the opening draw's result ---------------------------------------------

/**
 * The access code's refusal beside its field (and read out: role="alert"), or none.
 * @param {string | null} text
 */
function showAccessError(text) {
  $("access-error").hidden = text === null;
  $("access-error").textContent = text ?? "";
  if (text === null) $("access-code").removeAttribute("aria-invalid");
  else $("access-code").setAttribute("aria-invalid", "true");
}

/**
 * The headers a token request carries for early access: the code typed, while the field applies.
 * @returns {Record<string, string>}
 */
function accessHeaders() {
  const code = $("access-code").value.trim();
  return !$("access").hidden && code ? { "Access-Code": code } : {};
}

/**
 * What the opening draw decided for this shopper: their place, whether they won or lost.
 * @param {{ sku: string }} view
 */
function renderDrawResult(view) {
  const result = state.drawResult?.sku === view.sku ? state.drawResult : null;
  $("draw-result").hidden = result === null;
  if (!result) return;
  $("draw-result").dataset.outcome = result.won ? "won" : "lost";
  const place = `The opening draw placed you ${result.position} of ${result.entrants}`;
  /** @type {Record<string, string>} */
  const why = {
    SOLD_OUT: "the units ran out before your place. Join the waitlist below for one that comes back.",
    INSUFFICIENT_STOCK: "fewer units were left at your place than you asked for.",
    LIMIT_EXCEEDED: "your entry would have passed the per-shopper limit.",
  };
  $("draw-result").textContent = result.won
    ? `${place}: you won a hold on ${result.quantity}.`
    : `${place}: ${(result.code && why[result.code]) ?? "your entry was not held."}`;
}

/** @param {number} quantity */
async function buy(quantity) {
  state.busy = true;
  $("buy").disabled = true;
  try {
    await reserve(quantity);
  } finally {
    state.busy = false;
    renderSku();
  }
}

/** @param {number} quantity */
async function reserve(quantity) {
  const sku = state.sku;
  if (!sku) return;
  const challenges = await passChallenges(sku);
  if (!challenges) return;
  say("Asking the shop for your turn…");
  const token = /** @type {Answer<PurchaseToken>} */ (
    await api("POST", `/api/skus/${encodeURIComponent(sku)}/tokens`, {
      auth: true,
      extra: { ...challenges, ...accessHeaders() },
    })
  );
  const turnstile = /** @type {PageWindow} */ (window).turnstile;
  if (turnstile && document.body.dataset.turnstileSiteKey) turnstile.reset("#turnstile"); // spent
  const codeRefused = apiError(token)?.code === "ACCESS_CODE_INVALID";
  showAccessError(codeRefused ? errorText(token) : null);
  if (codeRefused) {
    say("Not reserved: the access code was refused (see under the field).", "error");
    $("access-code").focus();
    return;
  }
  if (token.status !== 201) {
    say(`Not reserved. ${errorText(token)}`, "error");
    return;
  }
  const draw = state.draw;
  const inWindow = draw && !draw.decidedAt && Date.now() >= Date.parse(draw.opensAt);
  say(inWindow ? "Entered the opening draw: your answer comes when the window closes…" : "Reserving…");
  const answer = /** @type {Answer<Reservation>} */ (
    await api("POST", `/api/skus/${encodeURIComponent(sku)}/reservations`, {
      auth: true,
      body: { token: token.json.token, quantity, ...sizesBody() },
    })
  );
  // A draw places every entrant, winner or not (a refusal carries its place in error.details.draw).
  const place = answer.status === 202 ? answer.json.draw : apiError(answer)?.details?.draw;
  state.drawResult = place
    ? { sku, won: answer.status === 202, quantity, code: apiError(answer)?.code, ...place }
    : null;
  if (answer.status !== 202) {
    say(`Not reserved. ${errorText(answer)}${sizesLeft(apiError(answer)?.details?.variants)}`, "error");
    return;
  }
  if (answer.json.variant) state.asked.set(answer.json.reservationId, chosenSizes());
  state.reservation = { ...answer.json, order: { persisted: false, status: null } };
  remember(answer.json);
  state.grantedId = null;
  // A reservation decided by the opening draw says where it came (GET of it does not repeat it).
  state.drawn = answer.json.draw ? { id: answer.json.reservationId, ...answer.json.draw } : null;
  const retried = state.retried503 > 0 ? ` (the shop was busy: asked ${state.retried503 + 1} times, one hold)` : "";
  const size = answer.json.variant ? ` in size ${sizeName(answer.json.variant)}` : "";
  say(
    `Reserved ${quantity}${size}: the stock is held for you until ${clock(answer.json.expiresAt ?? Date.now())}. Pay to make it yours.${retried}`,
    "ok",
  );
  renderReservation();
  renderHolds();
  // Its Pay and Cancel in view (on a phone the card is below the sale).
  $("reservation").scrollIntoView({ block: "nearest" });
  schedulePoll(0);
  pollSku();
}

// Bot challenges (API.md "Bots") --------------------------------------------------------------

/** SKUs with no proof of work (the challenge route answered 404): each shopper request counts. @type {Set<string>} */
const noChallenge = new Set();

/**
 * The answers the token request needs: a proof of work when the SKU offers a challenge (solved in
 * a Web Worker, with its progress shown and a Cancel button), and the Turnstile widget's answer when
 * the page has a site key. Null when the shopper cancelled or an answer is missing.
 */
/**
 * @param {string} sku
 * @returns {Promise<Record<string, string> | null>}
 */
async function passChallenges(sku) {
  /** @type {Record<string, string>} */
  const headers = {};
  // A SKU whose challenge route answered 404 (proof of work off) is not asked again on this page.
  const pow = noChallenge.has(sku)
    ? { status: 404, json: null }
    : /** @type {Answer<PowChallenge>} */ (
        await api("GET", `/api/skus/${encodeURIComponent(sku)}/challenge`, { auth: true })
      );
  if (pow.status === 404) noChallenge.add(sku);
  if (pow.status === 200 && pow.json) {
    const answer = await solveProofOfWork(pow.json);
    if (!answer) return null;
    headers["Proof-Of-Work"] = answer;
  }
  if (document.body.dataset.turnstileSiteKey) {
    const answer = /** @type {PageWindow} */ (window).turnstile?.getResponse("#turnstile");
    if (!answer) {
      say("Complete the check above first: the shop asks every buyer to, against bots.", "error");
      return null;
    }
    headers["CF-Turnstile-Response"] = answer;
  }
  return headers;
}

/**
 * What the solver (pow-worker.js) posts: its progress, then the answer.
 * @typedef {{ progress: number, answer?: undefined } | { answer: string, tried: number, progress?: undefined }} PowMessage
 */
/**
 * @param {PowChallenge} challenge
 * @returns {Promise<string | null>}
 */
function solveProofOfWork({ challenge, bits }) {
  return new Promise((resolve) => {
    const worker = new Worker("/static/pow-worker.js");
    const started = performance.now();
    const expected = (2 ** bits).toLocaleString("en");
    $("pow").hidden = false;
    $("pow-status").textContent = `Checking you are not a bot (about ${expected} tries)…`;
    say("Proving this is a person's browser: a moment of work, once per sale.");
    /** @param {string | null} answer */
    const finish = (answer) => {
      worker.terminate();
      $("pow").hidden = true;
      $("pow-cancel").onclick = null;
      resolve(answer);
    };
    $("pow-cancel").onclick = () => {
      finish(null);
      say("Cancelled. Buying needs this check; press Buy to start it again.", "error");
    };
    worker.onmessage = (/** @type {MessageEvent<PowMessage>} */ { data }) => {
      if (data.answer) {
        document.body.dataset.powMs = String(Math.round(performance.now() - started));
        finish(data.answer);
      } else if (data.progress !== undefined) {
        $("pow-status").textContent =
          `Checking you are not a bot: ${data.progress.toLocaleString("en")} of about ${expected} tries…`;
      }
    };
    worker.onerror = () => {
      finish(null);
      say("This browser could not run the bot check (Web Workers are off?).", "error");
    };
    worker.postMessage({ challenge, bits });
  });
}

/** Renders the Turnstile widget when the page has a site key; its script comes from Cloudflare. */
function loadTurnstile() {
  const siteKey = document.body.dataset.turnstileSiteKey;
  if (!siteKey) return;
  $("turnstile").hidden = false;
  const script = document.createElement("script");
  script.src = "https://challenges.cloudflare.com/turnstile/v0/api.js?render=explicit";
  script.async = true;
  script.onload = () => /** @type {PageWindow} */ (window).turnstile?.render("#turnstile", { sitekey: siteKey });
  script.onerror = () => {
    const status = $("turnstile-status");
    status.hidden = false;
    status.textContent =
      "The bot check (Cloudflare Turnstile) could not load from challenges.cloudflare.com, so buying is not possible here. Check the connection and reload.";
    document.body.dataset.turnstile = "unavailable";
  };
  document.head.append(script);
}

// 3. The reservation ---------------------------------------------------------------------------

/** @type {Set<ReservationStatus>} */
const TERMINAL = new Set(["paid", "expired", "cancelled", "refund_required"]);

/** @param {ReservationDetail} r */
function converged(r) {
  return r.order.persisted && r.order.status === r.status;
}

/** @param {number} delayMs */
function schedulePoll(delayMs) {
  clearTimeout(state.pollTimer);
  state.pollTimer = setTimeout(pollReservation, delayMs);
}

async function pollReservation() {
  const current = state.reservation;
  if (!current) return;
  const answer = /** @type {Answer<ReservationDetail>} */ (await api("GET", current.links.self, { auth: true }));
  if (state.reservation?.reservationId !== current.reservationId) return;
  if (answer.status === 429) {
    schedulePoll((answer.retryAfter || 5) * 1000);
    return;
  }
  if (!answer.ok) {
    say(`Could not read the reservation: ${errorText(answer)}`, "error");
    schedulePoll(3000);
    return;
  }
  const r = answer.json;
  state.reservation = r;
  remember(r);
  renderReservation();
  // The card says when the order row is in D1; the status line keeps the result of the last action. The
  // list has the reservation already (remember); it is asked again every 10 s, not on every change.
  // The receipt of its last decision comes once the log signed a checkpoint with it (about 2 s): it is
  // asked for every second until then, for a minute at most.
  if (!converged(r) || awaitingReceipt(r)) schedulePoll(1000);
  else if (!TERMINAL.has(r.status)) schedulePoll(10_000); // a hold can still lapse
}

// The verifiable sale (API.md v1.4; docs/VERIFY.md) ---------------------------------------------

/** The log's entry for each status: its receipt is the one the card shows. @type {Record<ReservationStatus, Receipt["entry"]>} */
const ENTRY_OF = {
  held: "hold",
  paid: "paid",
  refund_required: "refund_required",
  cancelled: "cancelled",
  expired: "expired",
};
/** How long a receipt is waited for, from the first read without it (reservation id → when). */
const RECEIPT_WAIT_MS = 60_000;
/** @type {Map<string, number>} */
const receiptWaits = new Map();

/**
 * Whether the receipt of this reservation's latest decision is still to come: the gateway keeps a
 * log (the body has `receipts`), the list lacks that entry's, and it was not waited for a minute yet.
 * @param {ReservationDetail} r
 */
function awaitingReceipt(r) {
  if (!r.receipts || r.receipts.some((x) => x.entry === ENTRY_OF[r.status])) return false;
  const since = receiptWaits.get(r.reservationId) ?? Date.now();
  receiptWaits.set(r.reservationId, since);
  return Date.now() - since < RECEIPT_WAIT_MS;
}

/**
 * @typedef {import("./receipt-check.js").ReceiptCheck} ReceiptCheck
 * @typedef {{ outcome: ReceiptCheck | null, at: number }} PendingCheck
 */
/** Receipts checked against the log's key (./receipt-check.js), by proof text: pending (null) or done. @type {Map<string, PendingCheck>} */
const receiptChecks = new Map();
/** How long a receipt this browser could not check (the key did not load) waits before it is tried again. */
const RECHECK_MS = 10_000;

/**
 * The check of this reservation's receipt, as `npm run verify-sale --receipt` does it short of the
 * log as it is now: started on first sight, re-rendering the card once it is done. Null while pending.
 * @param {ReservationDetail} r
 * @param {Receipt} receipt
 * @returns {ReceiptCheck | null}
 */
function receiptCheck(r, receipt) {
  const known = receiptChecks.get(receipt.proof);
  if (known && (known.outcome?.verified !== false || known.outcome.checked || Date.now() - known.at < RECHECK_MS))
    return known.outcome;
  /** @type {PendingCheck} */
  const pending = { outcome: null, at: Date.now() };
  receiptChecks.set(receipt.proof, pending);
  const expected = { sku: r.sku, reservation: r.reservationId, entry: receipt.entry, index: receipt.index };
  import("./receipt-check.js")
    .then((m) => m.checkReceipt("/api/log/key", receipt.proof, expected))
    .catch(() => /** @type {ReceiptCheck} */ ({ verified: false, checked: false, why: "the checker did not load" }))
    .then((outcome) => {
      pending.outcome = outcome;
      pending.at = Date.now();
      if (state.reservation?.reservationId === r.reservationId) renderReceipt(state.reservation);
    });
  return null;
}

/**
 * The card's "Sale log" line: the receipt of the latest decision the log has, and how to check it.
 * "Verified: entry N of M in the signed log" only once this page checked the receipt against the
 * log's key (N counted from 1: the proof's index + 1; M the size of the signed checkpoint it leads
 * to); while that is pending the card shows what it showed.
 * @param {ReservationDetail} r
 */
function renderReceipt(r) {
  const receipts = r.receipts ?? [];
  const receipt = receipts.find((x) => x.entry === ENTRY_OF[r.status]) ?? receipts.at(-1);
  const check = receipt ? receiptCheck(r, receipt) : null;
  if (!receipt || !check) {
    // Nothing new to say yet; another reservation's line is not this one's.
    if (!receipt || $("res-receipt").dataset.reservation !== r.reservationId) {
      $("res-receipt-label").hidden = true;
      $("res-receipt").hidden = true;
    }
    return;
  }
  $("res-receipt-label").hidden = false;
  $("res-receipt").hidden = false;
  /** @param {number} n */
  const n = (n) => n.toLocaleString("en");
  const text = check.verified
    ? `Verified: entry ${n(check.entry)} of ${n(check.of)} in the signed log`
    : check.checked
      ? `This receipt does not check out against the log's key: ${check.why}`
      : `Not verified: this page could not check the receipt (${check.why})`;
  if ($("res-receipt-text").textContent !== text) $("res-receipt-text").textContent = text;
  $("res-receipt").dataset.reservation = r.reservationId;
  $("res-receipt").dataset.entry = receipt.entry;
  $("res-receipt").dataset.verified = String(check.verified);
  // The receipt as a file for `npm run verify-sale -- <gateway> <sku> --receipt <file>` (docs/VERIFY.md).
  const file = `${r.sku}-${r.reservationId.slice(-8)}-${receipt.entry}.tlog-proof`;
  const link = $("res-receipt-file");
  link.setAttribute("download", file);
  link.setAttribute("href", `data:text/plain;charset=utf-8,${encodeURIComponent(receipt.proof)}`);
  $("res-verify-command").textContent = `npm run verify-sale -- ${location.origin} ${r.sku} --receipt ${file}`;
  $("res-checkpoint").setAttribute("href", `/api/skus/${encodeURIComponent(r.sku)}/log/checkpoint`);
}

function renderReservation() {
  const r = state.reservation;
  $("reservation").hidden = r === null;
  if (!r) return;
  $("res-id").textContent = r.reservationId;
  $("res-origin").hidden = r.reservationId !== state.grantedId;
  $("res-status").textContent = statusLabel(r.status);
  $("res-status").dataset.status = r.status;
  // What the hold costs, when the page knows its SKU's price.
  const view = state.view?.sku === r.sku ? state.view : null;
  const price = view?.price ?? null;
  $("res-quantity").textContent =
    view && price !== null ? `${r.quantity} · ${money(r.quantity * price, view.currency)} in all` : String(r.quantity);
  $("res-size-label").hidden = !r.variant;
  $("res-size").hidden = !r.variant;
  $("res-size").textContent = r.variant ? heldSizeText(r.reservationId, r.variant) : "";
  const drawn = state.drawn?.id === r.reservationId ? state.drawn : null;
  $("res-draw-label").hidden = drawn === null;
  $("res-draw").hidden = drawn === null;
  $("res-draw").textContent = drawn
    ? `position ${drawn.position} of ${drawn.entrants} (entry ${drawn.entryId.slice(0, 12)}…)`
    : "";
  $("res-order").textContent = r.order.persisted
    ? `persisted · status ${r.order.status}`
    : "waiting for the queue consumer…";
  $("res-order").dataset.persisted = String(r.order.persisted);
  renderReceipt(r);
  tickReservation();
  const held = r.status === "held";
  $("pay").disabled = !held;
  $("pay-fail").disabled = !held;
  $("cancel").disabled = !held;
}

/**
 * What the hold row says once the reservation is no longer held.
 * @type {Partial<Record<ReservationStatus, [string, string]>>}
 */
const OUTCOME = {
  paid: ["Payment", "paid: the units are yours"],
  // Released units go to the line first (first fit), then back on sale: "released" is true of both.
  cancelled: ["Hold", "cancelled: the units were released"],
  expired: ["Hold", "lapsed before payment: the units were released"],
  refund_required: ["Payment", "received, but it could not take the units: a refund is due"],
};

function tickReservation() {
  const r = state.reservation;
  if (!r) return;
  const outcome = OUTCOME[r.status];
  if (outcome) {
    [$("res-expires-label").textContent, $("res-expires").textContent] = outcome;
    return;
  }
  $("res-expires-label").textContent = "Held until";
  $("res-expires").textContent = r.expiresAt
    ? `${new Date(r.expiresAt).toLocaleTimeString()} (${duration(Date.parse(r.expiresAt) - Date.now())} left)`
    : "–";
}

/**
 * The reservation the detail card shows becomes `r` (a hold picked in the list).
 * @param {SeenReservation} r
 */
function focusOn(r) {
  if (state.reservation?.reservationId !== r.reservationId) {
    state.reservation = { ...r, order: r.order ?? { persisted: true, status: r.status } };
    renderReservation();
  }
}

/**
 * What a payment's answer means for the shopper.
 * @param {Reservation} r
 * @param {Answer<PaymentAck>} answer
 */
function paidText(r, answer) {
  const units = `${r.quantity} ${r.quantity === 1 ? "unit" : "units"}`;
  if (answer.json.reservationStatus === "paid")
    return `Paid: the ${units} of ${r.sku} ${r.quantity === 1 ? "is" : "are"} yours.`;
  if (answer.json.outcome === "refund_required")
    return "Your payment arrived after the hold lapsed: the units went to someone else, and a refund is on its way.";
  if (answer.json.reservationStatus === "cancelled")
    return `The payment did not go through, so the hold on ${units} was released.`;
  return `Payment received: the reservation is ${statusLabel(answer.json.reservationStatus)}.`;
}

/**
 * @param {"succeeded" | "failed"} outcome
 * @param {SeenReservation | null} [r]
 */
async function pay(outcome, r = state.reservation) {
  if (!r) return;
  focusOn(r);
  say(outcome === "succeeded" ? "Paying…" : "Simulating a failed payment…");
  const answer = /** @type {Answer<PaymentAck>} */ (
    await api("POST", "/dev/pay", { body: { reservationId: r.reservationId, outcome } })
  );
  if (!answer.ok) {
    say(`Not paid. ${errorText(answer)}`, "error");
    return;
  }
  say(paidText(r, answer), answer.json.reservationStatus === "paid" ? "ok" : "error");
  remember({ ...r, status: /** @type {ReservationStatus} */ (answer.json.reservationStatus) });
  schedulePoll(0);
  pollSku();
}

/** @param {SeenReservation | null} [r] */
async function cancel(r = state.reservation) {
  if (!r) return;
  focusOn(r);
  const answer = /** @type {Answer<ReservationDetail>} */ (await api("POST", `${r.links.self}/cancel`, { auth: true }));
  if (!answer.ok) {
    say(`Not cancelled. ${errorText(answer)}`, "error");
    return;
  }
  remember(answer.json);
  say(releasedText(r), "ok");
  schedulePoll(0);
  pollSku();
}

/**
 * Where a cancel's units went. The server serves its line first (first fit), then puts what is left
 * back on sale; the cancel's answer does not say which happened. Only when the page's view of the SKU
 * (read every second) has nobody waiting is it sure the units went back on sale; otherwise it says
 * what is true either way.
 * @param {SeenReservation} r
 */
function releasedText(r) {
  const view = state.view?.sku === r.sku ? state.view : null;
  const what = `the ${r.quantity} of ${r.sku}`;
  if (view && (view.waiting ?? 0) === 0) return `Cancelled: ${what} went back on sale.`;
  const them = r.quantity === 1 ? "it" : "them";
  return `Cancelled: ${what} went to the line: the next shopper waiting who can take ${them} gets a hold (back on sale if none can).`;
}

/**
 * Keeps what the page learnt of one of this shopper's reservations, and shows it in the list.
 * @param {SeenReservation} r
 */
function remember(r) {
  const known = state.holds.get(r.reservationId);
  state.holds.set(r.reservationId, { ...known, ...r, local: known?.local ?? true });
  renderHolds();
}

/** @type {Record<string, string>} */
const STATUS_LABEL = {
  held: "held",
  paid: "paid",
  cancelled: "cancelled",
  expired: "lapsed",
  refund_required: "refund due",
};
/** @param {string} status */
const statusLabel = (status) => STATUS_LABEL[status] ?? status;

async function refreshOrders() {
  if (!state.jwt) return;
  const answer = /** @type {Answer<ReservationList>} */ (await api("GET", "/api/me/reservations", { auth: true }));
  if (!answer.ok) return;
  const listed = new Set();
  for (const r of answer.json.reservations) {
    listed.add(r.reservationId);
    const known = state.holds.get(r.reservationId);
    // A status the page saw first (paid a moment ago) stays until D1 has caught up with it.
    const ahead = known && known.status !== "held" && r.status === "held";
    state.holds.set(r.reservationId, { ...known, ...r, status: ahead ? known.status : r.status, local: false });
  }
  // A reload: the newest hold still held is the one the reservation card follows.
  if (!state.reservation) {
    const held = answer.json.reservations.find((r) => r.status === "held");
    if (held) {
      state.reservation = { ...held, order: { persisted: true, status: held.status } };
      renderReservation();
      schedulePoll(0);
    }
  }
  renderHolds();
  if (state.view) renderSku();
}

/**
 * Newest first, in an order no refresh changes (issue #50: those made here moved when D1 listed them):
 * by when the hold lapses or lapsed, latest first (a SKU's holds are as long as each other, so this
 * is the order they were made in), then by id. The shopper's reservations carry no creation time.
 */
function holdList() {
  /** @param {Hold} r */
  const lapses = (r) => (r.expiresAt ? Date.parse(r.expiresAt) : Number.NEGATIVE_INFINITY);
  return [...state.holds.values()].sort(
    (a, b) =>
      lapses(b) - lapses(a) || (a.reservationId < b.reservationId ? -1 : a.reservationId > b.reservationId ? 1 : 0),
  );
}

/** What the list last showed: it is built again only when a hold changed (the focus stays put). */
let holdsKey = "";

function renderHolds() {
  const list = $("orders");
  const holds = holdList();
  if (!state.jwt) return;
  const key = JSON.stringify(holds.map((r) => [r.reservationId, r.status, r.quantity, r.expiresAt, r.variant]));
  if (key === holdsKey) {
    tickHolds();
    return;
  }
  holdsKey = key;
  const items = holds.map((r) => {
    const li = document.createElement("li");
    li.className = "hold";
    li.dataset.id = r.reservationId;
    li.dataset.status = r.status;
    const what = document.createElement("p");
    const status = document.createElement("span");
    status.className = "badge";
    status.dataset.status = r.status;
    status.textContent = statusLabel(r.status);
    const text = document.createElement("span");
    text.textContent = ` ${r.quantity} × ${r.sku}${r.variant ? `, size ${r.variant}` : ""}`;
    what.append(status, text);
    const when = document.createElement("p");
    when.className = "muted small when";
    when.dataset.expires = r.expiresAt ?? "";
    const id = document.createElement("code");
    id.className = "rid";
    id.textContent = r.reservationId;
    id.title = r.reservationId;
    li.append(what, when, id);
    if (r.status === "held") {
      const actions = document.createElement("div");
      actions.className = "row actions";
      const payButton = document.createElement("button");
      payButton.type = "button";
      payButton.textContent = "Pay";
      payButton.dataset.action = "pay";
      payButton.setAttribute("aria-label", `Pay for ${r.quantity} × ${r.sku}`);
      payButton.addEventListener("click", () => pay("succeeded", r));
      const cancelButton = document.createElement("button");
      cancelButton.type = "button";
      cancelButton.className = "danger";
      cancelButton.textContent = "Cancel";
      cancelButton.dataset.action = "cancel";
      cancelButton.setAttribute("aria-label", `Cancel the hold on ${r.quantity} × ${r.sku}`);
      cancelButton.addEventListener("click", () => cancel(r));
      actions.append(payButton, cancelButton);
      li.append(actions);
    }
    return li;
  });
  if (items.length === 0) {
    const li = document.createElement("li");
    li.className = "muted";
    li.textContent = "No holds or orders yet.";
    items.push(li);
  }
  list.replaceChildren(...items);
  tickHolds();
}

/** Each hold's line: how long it is still held, or what became of it. */
function tickHolds() {
  for (const li of /** @type {NodeListOf<HTMLLIElement>} */ ($("orders").querySelectorAll("li.hold"))) {
    const r = state.holds.get(li.dataset.id ?? "");
    const when = li.querySelector(".when");
    if (!r || !when) continue;
    if (r.status === "held" && r.expiresAt) {
      when.textContent = `held until ${clock(r.expiresAt)} (${duration(Date.parse(r.expiresAt) - Date.now())} left)`;
    } else {
      when.textContent = OUTCOME[r.status]?.[1] ?? "";
    }
  }
}

// Wiring -----------------------------------------------------------------------------------------

/** @param {string} sku */
function showSku(sku) {
  if (state.waitlist?.sku !== sku) stopWaitlist();
  state.sku = sku;
  state.view = null;
  state.draw = null;
  showAccessError(null);
  const url = new URL(location.href);
  url.searchParams.set("sku", sku);
  history.replaceState(null, "", url);
  pollSku();
  restoreLine();
}

$("user-form").addEventListener("submit", (event) => {
  event.preventDefault();
  signIn($("user").value.trim());
});
$("sku-form").addEventListener("submit", (event) => {
  event.preventDefault();
  showSku($("sku").value.trim());
});
$("buy-form").addEventListener("submit", (event) => {
  event.preventDefault();
  buy(Number($("quantity").value));
});
$("pay").addEventListener("click", () => pay("succeeded"));
$("pay-fail").addEventListener("click", () => pay("failed"));
$("cancel").addEventListener("click", () => cancel());
// The orders list refreshes every 10 s while the tab is seen: a hold that lapses, or one paid in
// another tab, shows here (each request counts against the shopper's rate limit, 20 per 10 s).
setInterval(() => {
  if (document.visibilityState === "visible") refreshOrders();
}, 10_000);
$("join-waitlist").addEventListener("click", () => joinWaitlist(Number($("quantity").value)));
$("leave-waitlist").addEventListener("click", () => leaveWaitlist());
for (const id of FALLBACKS) $(id).addEventListener("change", () => renderSku());
// A code being corrected is no longer the refused one.
$("access-code").addEventListener("input", () => showAccessError(null));

loadTurnstile();
trackStatusLine();
const params = new URLSearchParams(location.search);
$("sku").value = params.get("sku") ?? $("sku").value;
showSku($("sku").value);
// A reload keeps the shopper signed in (this tab only), and with them every hold they have.
const remembered = sessionStorage.getItem(SHOPPER_KEY);
if (remembered) signIn(remembered);
setInterval(pollSku, 1000);
setInterval(() => {
  if (state.view) renderSku();
  tickReservation();
  tickHolds();
}, 250);
