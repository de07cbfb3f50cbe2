// <flashgate-buy>: the Flashgate buy button any shop page may embed (API.md v1.4 "Browser clients and
// the buy button"; docs/EMBED.md). A standard custom element in an open shadow root, no framework:
//   <script type="module" src="https://gateway.example/embed/flashgate.js"></script>
//   <flashgate-buy sku="tee" api="https://gateway.example"></flashgate-buy>
//   document.querySelector("flashgate-buy").getToken = () => fetch("/flashgate-jwt").then((r) => r.text());
// Attributes: sku, api (the gateway's base URL), quantity (default 1), turnstile-site-key (when the
// gateway checks Turnstile). Events (bubbling, composed): flashgate:held (detail: the reservation body,
// cancelable: preventDefault keeps the shopper on the page, else a gateway with Stripe sends them to
// Checkout), flashgate:sold-out (detail: the SKU's public view), flashgate:error (detail: the error body).
// Theming: the CSS custom properties below (--flashgate-*) and ::part(card|name|price|availability|
// countdown|sizes|buy|pay|join|leave|cancel|status|hold|timer|receipt|line|error).

/** @typedef {import("../../clients/typescript/src/schema").components["schemas"]} Schemas */
/** @typedef {{ id: string, name?: string, available: number, held?: number }} Variant */
/** @typedef {Schemas["PublicSku"] & { variants?: Variant[] }} PublicSku */
/** @typedef {Schemas["Reservation"] & { variant?: string | null }} Reservation */
/** @typedef {Schemas["PowChallenge"]} PowChallenge */
/** @typedef {Schemas["WaitlistPlace"]} WaitlistPlace */
/** @typedef {Schemas["Checkout"]} Checkout */
/**
 * The contract's error body, or one the element makes when no answer came (code NETWORK_ERROR: the
 * gateway unreachable, or the browser refused its answer, as for a page whose origin is not allowed).
 * @typedef {{ error: { code: string, message: string, details?: Record<string, unknown> } }} ErrorBody
 */
/** @typedef {{ status: number, json: any, ok: boolean }} Answer */
/** @typedef {{ render(box: HTMLElement, options: { sitekey: string }): string, getResponse(id: string): string | undefined }} Turnstile */

/** Cloudflare's Turnstile API, once its script has loaded in the page. */
const turnstile = () => /** @type {{ turnstile?: Turnstile }} */ (/** @type {unknown} */ (window)).turnstile;

const STYLE = `
:host { display: block; font: inherit; color: var(--flashgate-text, #1d1d1f);
  --fg-accent: var(--flashgate-accent, #0b57d0); --fg-accent-text: var(--flashgate-accent-text, #fff);
  --fg-muted: var(--flashgate-muted, #4a4a52); --fg-bg: var(--flashgate-background, #fff);
  --fg-border: var(--flashgate-border, #c6c6cc); --fg-radius: var(--flashgate-radius, 8px);
  --fg-error: var(--flashgate-error, #b3261e); }
:host([hidden]) { display: none; }
.card { background: var(--fg-bg); border: 1px solid var(--fg-border); border-radius: var(--fg-radius);
  padding: 1rem; display: grid; gap: .6rem; max-width: 28rem; overflow-wrap: anywhere; }
.name { font-weight: 600; font-size: 1.1em; margin: 0; }
.price { font-size: 1.3em; font-weight: 600; margin: 0; }
p { margin: 0; }
.muted, .availability, .countdown, .line { color: var(--fg-muted); }
fieldset { border: 1px solid var(--fg-border); border-radius: var(--fg-radius); padding: .4rem .6rem; margin: 0; }
fieldset label { display: inline-flex; align-items: center; gap: .4rem; margin-right: .8rem; min-height: 2.75rem; cursor: pointer; }
fieldset input { width: 1.5rem; height: 1.5rem; margin: 0; accent-color: var(--fg-accent); }
fieldset label.gone { color: var(--fg-muted); text-decoration: line-through; cursor: not-allowed; }
.later { display: flex; flex-wrap: wrap; gap: 0 .8rem; }
select { font: inherit; min-height: 2.75rem; border: 1px solid var(--fg-border); border-radius: var(--fg-radius);
  background: var(--fg-bg); color: inherit; padding: 0 .4rem; }
.actions { display: flex; flex-wrap: wrap; gap: .5rem; }
button { font: inherit; border-radius: var(--fg-radius); padding: .55rem 1.1rem; cursor: pointer;
  border: 1px solid var(--fg-accent); background: var(--fg-bg); color: var(--fg-accent); min-height: 2.75rem; }
button.primary { background: var(--fg-accent); color: var(--fg-accent-text); }
button:disabled { cursor: not-allowed; opacity: .6; }
button:focus-visible, input:focus-visible, select:focus-visible { outline: 3px solid var(--fg-accent); outline-offset: 2px; }
.hold { border-left: 4px solid var(--fg-accent); padding-left: .6rem; }
.timer { font-variant-numeric: tabular-nums; font-weight: 600; }
.receipt { color: var(--fg-muted); font-size: .9em; }
.error { color: var(--fg-error); }
[hidden] { display: none !important; }
`;

const TEMPLATE = `<style>${STYLE}</style>
<section class="card" part="card" aria-label="Buy">
  <p class="name" part="name"></p>
  <p class="price" part="price"></p>
  <p class="availability" part="availability"></p>
  <p class="countdown" part="countdown" hidden></p>
  <fieldset class="sizes" part="sizes" hidden><legend>Size</legend><div class="size-options"></div>
    <div class="later"><label>Second choice <select class="size-2"></select></label>
    <label>Third choice <select class="size-3"></select></label></div>
    <p class="muted">Taken in this order if your size is gone.</p><p class="size-gone" hidden></p></fieldset>
  <div class="turnstile" hidden></div>
  <div class="actions">
    <button type="button" class="buy primary" part="buy" disabled>Buy</button>
    <button type="button" class="join" part="join" hidden>Join the line</button>
    <button type="button" class="leave" part="leave" hidden>Leave the line</button>
    <button type="button" class="pay primary" part="pay" hidden>Pay now</button>
    <button type="button" class="cancel" part="cancel" hidden>Release the hold</button>
  </div>
  <div class="hold" part="hold" hidden>
    <p class="hold-what"></p>
    <p>Time left to pay: <span class="timer" part="timer" role="timer" aria-live="off"></span></p>
    <p class="receipt" part="receipt" hidden></p>
  </div>
  <p class="line" part="line" hidden></p>
  <p class="status" part="status" role="status" aria-live="polite"></p>
  <p class="error" part="error" role="alert"></p>
</section>`;

/** Where the proof-of-work solver's Blob URL is kept, per gateway: fetched once a page. @type {Map<string, Promise<string>>} */
const solverUrls = new Map();

/** @typedef {typeof import("../static/receipt-check.js")} ReceiptChecker */
/** @type {Promise<ReceiptChecker> | null} */
let receiptChecker = null;
/**
 * The receipt checker, a module beside this one (/embed/receipt-check.js, shared with the storefront):
 * imported once a page, when a receipt is first there, so the element itself stays small.
 * @returns {Promise<ReceiptChecker>}
 */
function loadReceiptChecker() {
  if (!receiptChecker) {
    receiptChecker = import(new URL("./receipt-check.js", import.meta.url).href);
    receiptChecker.catch(() => {
      receiptChecker = null;
    });
  }
  return receiptChecker;
}

/** How often the line's place is read while waiting, and the public view while the page is open. */
const LINE_POLL_MS = 2000;
const VIEW_POLL_MS = 5000;
/**
 * How many times the hold the line gave is looked for once the shopper's place is gone (every
 * LINE_POLL_MS: a minute), as the storefront does: its order row reaches GET /api/me/reservations
 * through the queue's consumer, a moment after the line let the shopper go.
 */
const LINE_LOOKS = 30;
/** How often a hold is read until the sale log's receipt of it is there, and how many times at most. */
const RECEIPT_POLL_MS = 1000;
const RECEIPT_TRIES = 60;
/** How soon a receipt this page could not check (its key or checker did not load) is checked again, as the storefront does. */
const RECEIPT_RECHECK_MS = 10_000;
/** A kept purchase token this close to its expiry is not sent again: it could lapse on its way. */
const TOKEN_MARGIN_MS = 5000;

class NetworkError extends Error {}

export class FlashgateBuy extends HTMLElement {
  static observedAttributes = ["sku", "api"];

  /**
   * The shopper's JWT, from the host page: a function returning it or a promise of it (null or
   * undefined: not signed in).
   * @type {(() => string | null | undefined | Promise<string | null | undefined>) | null}
   */
  getToken = null;

  /** @type {ShadowRoot} */ #root;
  /** @type {PublicSku | null} */ #view = null;
  /** @type {Reservation | null} */ #hold = null;
  /** @type {WaitlistPlace | null} */ #place = null;
  /** @type {number | undefined} */ #viewTimer;
  /** @type {number | undefined} */ #tick;
  /** @type {number | undefined} */ #lineTimer;
  /** @type {number | undefined} */ #receiptTimer;
  /** When the countdown reaches the start (this page's clock, from opensInSeconds). @type {number | null} */
  #opensAt = null;
  #busy = false;
  /** Whether the shopper's own hold and place in line were looked for (once a page, when signed in). */
  #resumed = false;
  /** The gateway has no Stripe (its checkout route answered 404). */
  #noStripe = false;
  #soldOutSent = false;
  /** The shopper picked their first size (not the element's default): it stays picked, sold out or not. */
  #sizePicked = false;
  /** The error shown, if any. @type {ErrorBody | null} */
  #error = null;
  /** The SKU offers no proof of work (its challenge route answered 404). */
  #noChallenge = false;
  /**
   * A hold asked with this purchase token and body whose answer never came (no network, or the
   * gateway failing): the next Buy with the same choice sends them again, which answers that same
   * hold if it was made (API.md "Replaying the same token"), never a second one. Not once the token
   * has expired (`expiresAt`, the mint's): that answers only TOKEN_EXPIRED.
   * @type {{ token: string, body: string, expiresAt: string } | null}
   */
  #unanswered = null;
  /**
   * The error the last read of the shopper's place showed when it failed (null while reads succeed): a
   * read that succeeds takes back only this one, not a later error. @type {ErrorBody | null}
   */
  #lineError = null;
  /** Looks for the hold the line gave since the shopper's place was found gone. */
  #lineLooks = 0;
  /** The same for the reads of the SKU's view. @type {ErrorBody | null} */
  #viewError = null;
  /** @type {Worker | null} */ #worker = null;
  /** @type {string | null} */ #turnstileWidget = null;
  #generation = 0;

  constructor() {
    super();
    this.#root = this.attachShadow({ mode: "open" });
    this.#root.innerHTML = TEMPLATE;
    this.#el("buy").addEventListener("click", () => void this.buy());
    this.#el("join").addEventListener("click", () => void this.#join());
    this.#el("leave").addEventListener("click", () => void this.#leave());
    this.#el("cancel").addEventListener("click", () => void this.#cancel());
    this.#el("pay").addEventListener("click", () => {
      if (this.#hold) void this.#checkout(this.#hold).catch((error) => this.#failWith(error));
    });
  }

  connectedCallback() {
    this.#start();
  }

  disconnectedCallback() {
    this.#stop();
  }

  attributeChangedCallback() {
    if (this.isConnected) this.#start();
  }

  /** The reservation this element holds now, if any. */
  get reservation() {
    return this.#hold;
  }

  /**
   * An element of the shadow root by its class.
   * @param {string} name
   * @returns {HTMLElement}
   */
  #el(name) {
    return /** @type {HTMLElement} */ (this.#root.querySelector(`.${name}`));
  }

  /** @param {string} name @param {string} text */
  #text(name, text) {
    const el = this.#el(name);
    el.textContent = text;
    el.hidden = text === "";
  }

  /** @param {string} name @param {boolean} shown */
  #show(name, shown) {
    this.#el(name).hidden = !shown;
  }

  get #sku() {
    return this.getAttribute("sku") ?? "";
  }

  get #quantity() {
    const q = Number(this.getAttribute("quantity") ?? "1");
    return Number.isInteger(q) && q >= 1 ? q : 1;
  }

  #start() {
    this.#stop();
    this.#generation++;
    this.#soldOutSent = false;
    this.#noChallenge = false;
    this.#resumed = false;
    this.#hold = null;
    this.#unanswered = null;
    this.#lineError = null;
    this.#lineLooks = 0;
    this.#viewError = null;
    this.#sizePicked = false;
    // Another SKU (or the same anew): the place in a line is read again, not carried over.
    this.#place = null;
    this.#text("line", "");
    if (!this.#sku || !this.getAttribute("api")) {
      this.#fail({
        error: { code: "INVALID_REQUEST", message: 'The buy button needs its "sku" and "api" attributes.' },
      });
      return;
    }
    this.#renderTurnstile();
    void this.#refresh();
    this.#viewTimer = window.setInterval(() => void this.#refresh(), VIEW_POLL_MS);
    this.#tick = window.setInterval(() => this.#everySecond(), 1000);
  }

  #stop() {
    window.clearInterval(this.#viewTimer);
    window.clearInterval(this.#tick);
    window.clearTimeout(this.#lineTimer);
    window.clearTimeout(this.#receiptTimer);
    this.#worker?.terminate();
    this.#worker = null;
  }

  // Talking to the gateway -----------------------------------------------------------------------

  /**
   * One call to the gateway: its status and JSON answer. A request the browser could not make or
   * whose answer it refused (no network, or CORS: this page's origin is not in ALLOWED_ORIGINS)
   * throws a NetworkError.
   * @param {string} method
   * @param {string} path
   * @param {{ auth?: boolean, body?: unknown, headers?: Record<string, string> }} [options]
   * @returns {Promise<Answer>}
   */
  async #call(method, path, options = {}) {
    /** @type {Record<string, string>} */
    const headers = { ...options.headers };
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    if (options.auth) headers.Authorization = `Bearer ${await this.#jwt()}`;
    const base = (this.getAttribute("api") ?? "").replace(/\/+$/, "");
    let response;
    try {
      response = await fetch(`${base}${path}`, {
        method,
        headers,
        body: options.body === undefined ? null : JSON.stringify(options.body),
        mode: "cors",
        credentials: "omit",
      });
    } catch {
      throw new NetworkError(
        `Could not reach the sale at ${base}: the connection failed, or this page (${location.origin}) is not one the sale allows.`,
      );
    }
    const json = await response.json().catch(() => null);
    return { status: response.status, json, ok: response.ok };
  }

  /** The shopper's JWT from the host page, or an error in words when it gives none. */
  async #jwt() {
    const token = this.getToken ? await this.getToken() : null;
    if (!token) throw new SignInError();
    return token;
  }

  /** @param {string} sku */
  #skuPath(sku) {
    return `/api/skus/${encodeURIComponent(sku)}`;
  }

  // The SKU's public view --------------------------------------------------------------------------

  async #refresh() {
    const generation = this.#generation;
    try {
      const answer = await this.#call("GET", this.#skuPath(this.#sku));
      if (generation !== this.#generation) return;
      if (!answer.ok) {
        // Gone (archived): nothing left to buy, so its price, count and buttons go with it.
        if (answer.status === 404) this.#forgetView();
        this.#viewReadFailed(errorBody(answer.json));
        return;
      }
      // The view is read again (a 404 or a dropped connection that passed): its own error is past;
      // another shown since (a Buy's) stays.
      if (this.#viewError) {
        if (this.#error === this.#viewError) this.#fail(null);
        this.#viewError = null;
      }
      this.#view = /** @type {PublicSku} */ (answer.json);
      this.#render();
      if (!this.#resumed && this.getToken) {
        this.#resumed = true;
        await this.#resume();
      }
    } catch (error) {
      if (generation !== this.#generation) return;
      if (error instanceof NetworkError) this.#viewReadFailed(thrownBody(error));
      else this.#failWith(error);
    }
  }

  /**
   * A read of the view that failed (a 404, the gateway busy, the connection dropped): said once while
   * it lasts, and again only if it fails otherwise, not at every read.
   * @param {ErrorBody} body
   */
  #viewReadFailed(body) {
    if (body.error.code === this.#viewError?.error.code) return;
    this.#fail(body);
    this.#viewError = body;
  }

  /** The SKU's view is no more (404): what it showed goes, and nothing offers to buy it. */
  #forgetView() {
    this.#view = null;
    this.#opensAt = null;
    for (const name of ["price", "availability", "countdown"]) this.#text(name, "");
    for (const part of ["buy", "join", "sizes"]) this.#show(part, false);
  }

  #render() {
    const view = this.#view;
    if (!view) return;
    this.#text("name", view.name);
    this.#text("price", view.price === null ? "" : formatMoney(view.price, view.currency));
    if (view.opensInSeconds) this.#opensAt = Date.now() + view.opensInSeconds * 1000;
    else this.#opensAt = null;
    this.#renderSizes(view);
    const soldOut = this.#available() < this.#quantity;
    const phase = view.phase ?? (view.status === "paused" ? "paused" : "open");
    /** @type {string[]} */
    const facts = [];
    if (phase === "paused") facts.push("Sale paused");
    else if (phase === "ended") facts.push("Sale ended");
    else if (view.available === 0) facts.push("Sold out");
    else facts.push(`${view.available.toLocaleString()} left`);
    if (view.held > 0 && phase === "open") facts.push(`${view.held.toLocaleString()} held, not paid yet`);
    if (view.waiting > 0) facts.push(`${view.waiting.toLocaleString()} waiting in line`);
    if (view.perUserLimit) facts.push(`up to ${view.perUserLimit} per person`);
    this.#text("availability", facts.join(" · "));
    this.#everySecond();
    const open = phase === "open";
    const waiting = this.#place !== null;
    const buy = /** @type {HTMLButtonElement} */ (this.#el("buy"));
    buy.disabled = this.#busy || !open || soldOut;
    buy.textContent =
      view.price === null ? "Buy" : `Buy for ${formatMoney(view.price * this.#quantity, view.currency)}`;
    this.#show("buy", !(open && soldOut));
    this.#show("join", open && soldOut && !waiting && this.#hold === null);
    this.#show("leave", waiting);
    // The sizes picked are gone while others have units: no Buy (their line is offered), and why said.
    const picked = this.#chosenSizes();
    const names = picked.map((id) => view.variants?.find((v) => v.id === id)?.name ?? id).join(" and ");
    const gone = open && view.available > 0 && picked.length > 0 && this.#available() === 0;
    const join = waiting ? "" : ", or join its line";
    this.#text(
      "size-gone",
      gone ? `${names} ${picked.length === 1 ? "is" : "are"} sold out: pick another size${join}.` : "",
    );
    if (open && soldOut && !this.#soldOutSent) {
      this.#soldOutSent = true;
      this.#emit("flashgate:sold-out", view);
    } else if (open && !soldOut && this.#soldOutSent) {
      // Back on sale (a hold lapsed or was let go): a refusal for want of stock is past, and selling
      // out again is news again.
      this.#soldOutSent = false;
      const code = this.#error?.error.code;
      if (code === "SOLD_OUT" || code === "INSUFFICIENT_STOCK") this.#fail(null);
    }
  }

  /** Units available to this shopper's choice: the most any size picked has, or the SKU's. */
  #available() {
    const view = this.#view;
    if (!view) return 0;
    const sizes = this.#chosenSizes();
    const units = (view.variants ?? []).filter((v) => sizes.includes(v.id)).map((v) => v.available);
    return units.length ? Math.max(...units) : view.available;
  }

  /**
   * The size picker: a radio a size (the first choice) and two selects (the sizes to take if it is
   * gone), updated in place so the focus stays. A sold-out size is greyed and cannot be picked, unless
   * every size is: then the shopper picks the sizes to wait for in the line.
   * @param {PublicSku} view
   */
  #renderSizes(view) {
    const variants = view.variants ?? [];
    this.#show("sizes", variants.length > 0);
    if (!variants.length) return;
    const allGone = view.available === 0;
    const options = this.#el("size-options");
    const key = variants.map((v) => v.id).join("\n");
    const selects = [this.#el("size-2"), this.#el("size-3")].map((el) => /** @type {HTMLSelectElement} */ (el));
    if (options.dataset.key !== key) {
      options.dataset.key = key;
      options.replaceChildren(
        ...variants.map((v) => {
          const label = document.createElement("label");
          const input = document.createElement("input");
          input.type = "radio";
          input.name = "size";
          input.value = v.id;
          input.addEventListener("change", () => {
            this.#sizePicked = true;
            this.#render();
          });
          label.append(input, document.createElement("span"));
          return label;
        }),
      );
      for (const select of selects) {
        select.replaceChildren(new Option("none", ""), ...variants.map((v) => new Option(v.id, v.id)));
        select.onchange = () => this.#render();
      }
    }
    /** @param {Variant} v */
    const text = (v) => `${v.name ?? v.id} (${v.available > 0 ? `${v.available} left` : "sold out"})`;
    /** @param {Variant} v */
    const off = (v) => v.available === 0 && !allGone;
    const radios = /** @type {HTMLInputElement[]} */ ([...options.querySelectorAll("input")]);
    variants.forEach((v, i) => {
      const radio = /** @type {HTMLInputElement} */ (radios[i]);
      const label = /** @type {HTMLElement} */ (radio.nextElementSibling);
      if (label.textContent !== text(v)) label.textContent = text(v);
      radio.disabled = off(v);
      /** @type {HTMLElement} */ (radio.parentElement).classList.toggle("gone", v.available === 0);
    });
    // The shopper's own pick stays when it sells out (greyed: they may join its line, or pick another),
    // never swapped for a size they did not choose; the element's default moves to one with stock.
    let first = radios.find((r) => r.checked);
    if (!first || (first.disabled && !this.#sizePicked)) {
      first = radios.find((r) => !r.disabled);
      if (first) first.checked = true;
    }
    const taken = [first?.value];
    selects.forEach((select, n) => {
      const was = select.value;
      variants.forEach((v, i) => {
        const option = /** @type {HTMLOptionElement} */ (select.options[i + 1]);
        if (option.textContent !== text(v)) option.textContent = text(v);
        option.disabled = taken.includes(v.id) || off(v);
      });
      const keep = variants.find((v) => v.id === was);
      select.value = keep && !taken.includes(was) && !off(keep) ? was : "";
      select.disabled = n === 1 && !taken[1];
      if (select.disabled) select.value = "";
      taken.push(select.value || undefined);
    });
  }

  /** The sizes picked, in order of preference (none for a SKU without sizes). @returns {string[]} */
  #chosenSizes() {
    if (this.#el("sizes").hidden) return [];
    const checked = /** @type {HTMLInputElement | null} */ (this.#root.querySelector('input[name="size"]:checked'));
    const later = ["size-2", "size-3"].map((part) => /** @type {HTMLSelectElement} */ (this.#el(part)).value);
    return [...new Set([checked?.value ?? "", ...later].filter(Boolean))];
  }

  /** The request body's `variants`, when the SKU has sizes. */
  #sizesBody() {
    const sizes = this.#chosenSizes();
    return sizes.length ? { variants: sizes } : {};
  }

  /** The countdown to the start, and the hold's timer. */
  #everySecond() {
    if (this.#opensAt !== null) {
      const left = Math.max(0, Math.ceil((this.#opensAt - Date.now()) / 1000));
      this.#text("countdown", left > 0 ? `Opens in ${duration(left)}` : "Opening…");
      if (left === 0) {
        this.#opensAt = null;
        void this.#refresh();
      }
    } else this.#text("countdown", "");
    const hold = this.#hold;
    if (hold?.expiresAt) {
      const left = Math.max(0, Math.ceil((Date.parse(hold.expiresAt) - Date.now()) / 1000));
      this.#el("timer").textContent = duration(left);
      if (left === 0) {
        this.#hold = null;
        this.#show("hold", false);
        this.#show("cancel", false);
        this.#show("pay", false);
        this.#say("Your hold ran out and its units went back on sale.");
        void this.#refresh();
      }
    }
  }

  // Buying ------------------------------------------------------------------------------------------

  /** Runs the whole purchase: challenges, a purchase token, the hold. */
  async buy() {
    if (this.#busy) return;
    this.#busy = true;
    this.#fail(null);
    this.#render();
    try {
      const asked = { quantity: this.#quantity, ...this.#sizesBody() };
      const kept = this.#unanswered?.body === JSON.stringify(asked) ? this.#unanswered : null;
      let reservation = null;
      if (kept && Date.parse(kept.expiresAt) - TOKEN_MARGIN_MS > Date.now()) {
        this.#say("Reserving…");
        reservation = await this.#reserve(kept.token, kept.expiresAt, asked);
      }
      // The kept token has expired (or the gateway says so: this page's clock is behind its own): the
      // lost answer's hold, if it made one, is looked for; else a new token, in this same press.
      if (kept && (!reservation || reservation.json?.error?.code === "TOKEN_EXPIRED")) {
        this.#unanswered = kept; // a look that fails is made again at the next press
        if (await this.#lostHold(asked)) return;
        reservation = null;
      }
      if (!reservation) {
        this.#unanswered = null;
        const headers = await this.#challenges();
        if (!headers) return;
        this.#say("Reserving…");
        const minted = await this.#call("POST", `${this.#skuPath(this.#sku)}/tokens`, { auth: true, headers });
        if (minted.status !== 201) return this.#refused(minted.json);
        reservation = await this.#reserve(minted.json.token, minted.json.expiresAt, asked);
      }
      if (reservation.status !== 202) return this.#refused(reservation.json);
      await this.#held(/** @type {Reservation} */ (reservation.json));
    } catch (error) {
      this.#failWith(error);
    } finally {
      this.#busy = false;
      this.#render();
    }
  }

  /**
   * Asks for the hold with this purchase token; kept to send again until an answer decides it.
   * @param {string} token
   * @param {string} expiresAt the token's
   * @param {{ quantity: number, variants?: string[] }} asked
   */
  async #reserve(token, expiresAt, asked) {
    this.#unanswered = { token, body: JSON.stringify(asked), expiresAt };
    const answer = await this.#call("POST", `${this.#skuPath(this.#sku)}/reservations`, {
      auth: true,
      body: { token, ...asked },
    });
    // An answer (held or refused) decides this token; a server error or none (thrown) leaves it to send again.
    if (answer.status < 500) this.#unanswered = null;
    return answer;
  }

  /**
   * The hold a lost answer may have made, once its token can ask no more: the shopper's newest held
   * one of this choice that this element does not show yet. True when the press ends here: the hold
   * shown, or the look refused (a new token then could hold twice).
   * @param {{ quantity: number, variants?: string[] }} asked
   */
  async #lostHold(asked) {
    const { answer, holds } = await this.#holdsHere();
    if (!answer.ok) {
      this.#refused(answer.json);
      return true;
    }
    const hold = holds.find(
      (r) =>
        r.quantity === asked.quantity &&
        (!asked.variants || asked.variants.includes(r.variant ?? "")) &&
        r.reservationId !== this.#hold?.reservationId,
    );
    if (!hold) return false;
    this.#unanswered = null;
    await this.#held(hold);
    return true;
  }

  /**
   * The headers the token request needs: a proof of work when the SKU offers one (solved in a Web
   * Worker), the Turnstile widget's answer when the element renders it. Null when the shopper cannot pass.
   * @returns {Promise<Record<string, string> | null>}
   */
  async #challenges() {
    /** @type {Record<string, string>} */
    const headers = {};
    if (!this.#noChallenge) {
      const challenge = await this.#call("GET", `${this.#skuPath(this.#sku)}/challenge`, { auth: true });
      if (challenge.status === 404 && challenge.json?.error?.code === "NOT_FOUND") this.#noChallenge = true;
      else if (challenge.status !== 200) {
        this.#refused(challenge.json);
        return null;
      } else headers["Proof-Of-Work"] = await this.#solve(/** @type {PowChallenge} */ (challenge.json));
    }
    if (this.#turnstileWidget !== null) {
      const answer = turnstile()?.getResponse(this.#turnstileWidget);
      if (!answer) {
        this.#fail({ error: { code: "CHALLENGE_REQUIRED", message: "Complete the check above first." } });
        return null;
      }
      headers["CF-Turnstile-Response"] = answer;
    }
    return headers;
  }

  /**
   * Solves a proof of work in a Web Worker started from a Blob URL of the gateway's solver.
   * @param {PowChallenge} pow
   * @returns {Promise<string>} the Proof-Of-Work header's value
   */
  async #solve({ challenge, bits }) {
    const expected = (2 ** bits).toLocaleString();
    this.#say(`Checking you are not a bot (about ${expected} tries)…`);
    const base = (this.getAttribute("api") ?? "").replace(/\/+$/, "");
    let url = solverUrls.get(base);
    if (!url) {
      url = fetch(`${base}/embed/pow-worker.js`, { mode: "cors", credentials: "omit" })
        .then((r) => {
          if (!r.ok) throw new Error(String(r.status));
          return r.text();
        })
        .then((code) => URL.createObjectURL(new Blob([code], { type: "text/javascript" })));
      solverUrls.set(base, url);
      url.catch(() => solverUrls.delete(base));
    }
    let source;
    try {
      source = await url;
    } catch {
      throw new NetworkError(`Could not load the bot check from ${base}.`);
    }
    return new Promise((resolve, reject) => {
      const worker = new Worker(source);
      this.#worker = worker;
      worker.onmessage = (/** @type {MessageEvent<{ answer?: string }>} */ event) => {
        if (event.data.answer === undefined) return;
        worker.terminate();
        this.#worker = null;
        resolve(event.data.answer);
      };
      worker.onerror = () => {
        worker.terminate();
        reject(new NetworkError("This browser could not run the bot check (Web Workers are blocked on this page?)."));
      };
      worker.postMessage({ challenge, bits });
    });
  }

  /**
   * A hold: shown with its timer, announced to the host page, then Stripe Checkout unless the page
   * takes over (preventDefault on flashgate:held) or the gateway has no Stripe.
   * @param {Reservation} reservation
   */
  async #held(reservation) {
    this.#showHold(reservation);
    const minutes = reservation.expiresAt
      ? Math.max(1, Math.round((Date.parse(reservation.expiresAt) - Date.now()) / 60000))
      : null;
    this.#say(`Reserved. ${minutes ? `You have about ${minutes} minute${minutes === 1 ? "" : "s"} to pay.` : ""}`);
    const proceed = this.#emit("flashgate:held", reservation, true);
    if (proceed) await this.#checkout(reservation);
  }

  /**
   * The shopper's holds of this SKU not lapsed yet, newest first (`GET /api/me/reservations`), and the
   * answer (its error when it is not 200: then no holds).
   */
  async #holdsHere() {
    const answer = await this.#call("GET", "/api/me/reservations", { auth: true });
    /** @type {Reservation[]} */
    const reservations = answer.ok ? answer.json.reservations : [];
    const holds = reservations.filter(
      (r) => r.sku === this.#sku && r.status === "held" && r.expiresAt !== null && Date.parse(r.expiresAt) > Date.now(),
    );
    return { answer, holds };
  }

  /**
   * The shopper's hold found again when the page loads (back from a Checkout they left, or a reload):
   * shown with its timer and announced with flashgate:held; unless the host page takes over, a
   * "Pay now" button opens Checkout (never at once: the shopper may just have come back from it).
   * Else their place in the line, if they wait in it. Nothing when signed out.
   */
  async #resume() {
    try {
      const { answer, holds } = await this.#holdsHere();
      if (!answer.ok) return;
      const hold = holds[0];
      if (hold) {
        this.#showHold(hold);
        this.#say("You hold this: pay before the timer runs out.");
        const payHere = this.#emit("flashgate:held", hold, true);
        this.#show("pay", payHere && !this.#noStripe);
      } else await this.#watchLine(true);
    } catch {
      // Signed out, or the gateway unreachable (the view's error says so): nothing to show.
    }
  }

  /**
   * Shows a hold of this shopper and its timer.
   * @param {Reservation} reservation
   */
  #showHold(reservation) {
    this.#hold = reservation;
    this.#place = null;
    window.clearTimeout(this.#lineTimer);
    this.#show("line", false);
    const name = this.#view?.name ?? reservation.sku;
    const variant = this.#view?.variants?.find((v) => v.id === reservation.variant);
    const size = reservation.variant ? `, size ${variant?.name ?? reservation.variant}` : "";
    this.#el("hold-what").textContent = `Held for you: ${reservation.quantity} × ${name}${size}.`;
    this.#show("hold", true);
    this.#show("cancel", true);
    this.#text("receipt", "");
    this.#render();
    void this.#receipt(reservation.reservationId, RECEIPT_TRIES);
    // The stock as it is after this hold (the public view is remembered a second per isolate).
    window.setTimeout(() => void this.#refresh(), 1100);
  }

  /**
   * The sale log's receipt of the hold (API.md v1.4 "The verifiable sale"), once the log signed a
   * checkpoint with it (within about 2 s), checked here against the log's key (GET /api/log/key) as
   * `npm run verify-sale --receipt` does: "Verified: entry N of M in the signed log", N counted from 1
   * (the proof's index from 0), M the size of the signed checkpoint the proof leads to; else why it
   * does not check out. Nothing is said while the check runs. The hold is read every second until
   * the receipt is there, a minute at most; a gateway keeping no log (no `receipts` in the body) is
   * not asked again.
   * @param {string} id
   * @param {number} tries
   */
  async #receipt(id, tries) {
    window.clearTimeout(this.#receiptTimer);
    const answer = await this.#call("GET", `/api/reservations/${encodeURIComponent(id)}`, { auth: true }).catch(
      () => null,
    );
    const hold = this.#hold;
    if (hold?.reservationId !== id) return;
    /** @type {{ entry: string, index: number, proof: string }[] | undefined} */
    const receipts = answer?.ok ? answer.json.receipts : [];
    const receipt = receipts?.find((r) => r.entry === "hold");
    if (receipt) {
      const base = (this.getAttribute("api") ?? "").replace(/\/+$/, "");
      const expected = { sku: hold.sku, reservation: id, entry: "hold", index: receipt.index };
      /** @type {import("../static/receipt-check.js").ReceiptCheck} */
      const check = await loadReceiptChecker()
        .then((m) => m.checkReceipt(`${base}/api/log/key`, receipt.proof, expected))
        .catch(() => ({ verified: false, checked: false, why: "the checker did not load" }));
      if (this.#hold?.reservationId !== id) return;
      /** @param {number} n */
      const n = (n) => n.toLocaleString("en");
      this.#text(
        "receipt",
        check.verified
          ? `Verified: entry ${n(check.entry)} of ${n(check.of)} in the signed log.`
          : check.checked
            ? `This receipt does not check out against the sale log's key: ${check.why}.`
            : `Not verified: the receipt could not be checked here (${check.why}).`,
      );
      if (!check.verified && !check.checked && tries > 1)
        this.#receiptTimer = window.setTimeout(() => void this.#receipt(id, tries - 1), RECEIPT_RECHECK_MS);
      return;
    }
    if (receipts && tries > 1)
      this.#receiptTimer = window.setTimeout(() => void this.#receipt(id, tries - 1), RECEIPT_POLL_MS);
  }

  /** @param {Reservation} reservation */
  async #checkout(reservation) {
    const here = location.href;
    const answer = await this.#call(
      "POST",
      `/api/reservations/${encodeURIComponent(reservation.reservationId)}/checkout`,
      {
        auth: true,
        body: { successUrl: here, cancelUrl: here },
      },
    );
    if (answer.status === 404 && answer.json?.error?.code === "NOT_FOUND") {
      // No Stripe on this gateway: the hold waits for the shop's own checkout.
      this.#noStripe = true;
      this.#show("pay", false);
      return;
    }
    if (answer.status !== 200 && answer.status !== 201) {
      this.#show("pay", true); // Stripe busy or refusing: the shopper may try again
      return this.#refused(answer.json);
    }
    this.#say("Taking you to payment…");
    location.assign(/** @type {Checkout} */ (answer.json).url);
  }

  async #cancel() {
    const hold = this.#hold;
    if (!hold) return;
    try {
      const answer = await this.#call("POST", `/api/reservations/${encodeURIComponent(hold.reservationId)}/cancel`, {
        auth: true,
      });
      if (!answer.ok) return this.#refused(answer.json);
      this.#hold = null;
      this.#show("hold", false);
      this.#show("cancel", false);
      this.#show("pay", false);
      this.#say("Hold released.");
      void this.#refresh();
    } catch (error) {
      this.#failWith(error);
    }
  }

  // The line ----------------------------------------------------------------------------------------

  async #join() {
    this.#fail(null);
    try {
      const answer = await this.#call("POST", `${this.#skuPath(this.#sku)}/waitlist`, {
        auth: true,
        body: { quantity: this.#quantity, ...this.#sizesBody() },
      });
      if (answer.status !== 202) return this.#refused(answer.json);
      this.#say("You are in the line.");
      await this.#watchLine();
    } catch (error) {
      this.#failWith(error);
    }
  }

  /**
   * Reads the shopper's place every 2 s; once it is gone, looks for the hold the line gave.
   * @param {boolean} [quietly] not waiting is no error (the page just looked)
   */
  async #watchLine(quietly = false) {
    window.clearTimeout(this.#lineTimer);
    const generation = this.#generation;
    try {
      const answer = await this.#call("GET", `${this.#skuPath(this.#sku)}/waitlist`, { auth: true });
      if (generation !== this.#generation) return;
      if ((answer.status === 200 || answer.status === 404) && this.#lineError) {
        // The line is read again: its own error is past (another shown since, a Buy's, stays).
        if (this.#error === this.#lineError) this.#fail(null);
        this.#lineError = null;
      }
      if (answer.status === 200) {
        const place = /** @type {WaitlistPlace} */ (answer.json);
        this.#place = place;
        this.#lineLooks = 0;
        const ahead = place.unitsAhead > 0 ? `, ${place.unitsAhead.toLocaleString()} units wanted ahead of you` : "";
        this.#text("line", `In line: number ${place.position.toLocaleString()}${ahead}.`);
        this.#render();
        this.#lineTimer = window.setTimeout(() => void this.#watchLine(), LINE_POLL_MS);
        return;
      }
      if (answer.status !== 404) return quietly ? undefined : this.#lineReadFailed(() => this.#refused(answer.json));
      // Still "waiting" until the hold the line gave is found: it reaches the shopper's reservations
      // through the queue, a moment after the place is gone, so a look that finds nothing (or fails)
      // is made again, a minute at most; a failed look reads the line again too.
      if (this.#place !== null) {
        const last = this.#lineLooks + 1 >= LINE_LOOKS;
        const found = await this.#holdFromLine(last);
        if (generation !== this.#generation) return;
        if (!found && !last && this.#place !== null) {
          this.#lineLooks++;
          this.#lineTimer = window.setTimeout(() => void this.#watchLine(), LINE_POLL_MS);
          return;
        }
      }
      this.#lineLooks = 0;
      this.#place = null;
      this.#text("line", "");
      this.#render();
    } catch (error) {
      if (generation !== this.#generation) return;
      if (quietly || error instanceof SignInError) return this.#failWith(error);
      this.#lineReadFailed(() => this.#failWith(error));
    }
  }

  /**
   * A read of the shopper's place that failed (the connection dropped, the gateway busy or refusing
   * for now): said once, and the place read again as usual, so the hold the line gives still shows.
   * @param {() => void} say the error shown and sent, the first time in a row
   */
  #lineReadFailed(say) {
    if (!this.#lineError) {
      say();
      this.#lineError = this.#error;
    }
    this.#lineTimer = window.setTimeout(() => void this.#watchLine(), LINE_POLL_MS);
  }

  /**
   * The line served this shopper: the newest hold of this SKU is theirs. True once it is shown; a
   * refused look is said only when it is the last (`last`), else it is looked for again.
   * @param {boolean} last
   */
  async #holdFromLine(last) {
    let answer;
    let holds;
    try {
      ({ answer, holds } = await this.#holdsHere());
    } catch (error) {
      if (error instanceof SignInError) throw error; // the shopper's sign-in, not the look: said at once
      // No answer: a look like any other that found nothing (counted), said only on the last.
      if (last) this.#failWith(error);
      return false;
    }
    if (!answer.ok) {
      if (last) this.#refused(answer.json);
      return false;
    }
    const hold = holds[0];
    if (!hold) return false;
    await this.#held(hold);
    return true;
  }

  async #leave() {
    try {
      const answer = await this.#call("DELETE", `${this.#skuPath(this.#sku)}/waitlist`, { auth: true });
      if (!answer.ok && answer.status !== 404) return this.#refused(answer.json);
      window.clearTimeout(this.#lineTimer);
      this.#place = null;
      this.#text("line", "");
      this.#say("You left the line.");
      this.#render();
    } catch (error) {
      this.#failWith(error);
    }
  }

  // Turnstile (where the gateway checks it) ---------------------------------------------------------

  #renderTurnstile() {
    const siteKey = this.getAttribute("turnstile-site-key");
    const box = this.#el("turnstile");
    box.hidden = !siteKey;
    if (!siteKey || this.#turnstileWidget !== null) return;
    const render = () => {
      const api = turnstile();
      if (api) this.#turnstileWidget = api.render(box, { sitekey: siteKey });
    };
    if (turnstile()) return render();
    const script = document.createElement("script");
    script.src = "https://challenges.cloudflare.com/turnstile/v0/api.js?render=explicit";
    script.async = true;
    script.onload = render;
    script.onerror = () =>
      this.#fail({
        error: {
          code: "CHALLENGE_REQUIRED",
          message: "The bot check (Cloudflare Turnstile) could not load, so buying is not possible here.",
        },
      });
    document.head.append(script);
  }

  // Words and events --------------------------------------------------------------------------------

  /** @param {string} text */
  #say(text) {
    this.#el("status").textContent = text;
  }

  /**
   * A refusal from the gateway: its message shown, flashgate:error (and flashgate:sold-out) sent.
   * @param {ErrorBody | null} body
   */
  #refused(body) {
    this.#fail(errorBody(body));
    // The stock may have moved (sold out, fewer left): show it as it is now.
    void this.#refresh();
  }

  /** @param {unknown} error */
  #failWith(error) {
    this.#fail(thrownBody(error));
  }

  /**
   * Shows an error in words (the contract's message) and sends flashgate:error; null clears it.
   * @param {ErrorBody | null} body
   */
  #fail(body) {
    this.#el("error").textContent = body?.error.message ?? "";
    this.#error = body;
    if (!body) return;
    this.#say("");
    this.#emit("flashgate:error", body);
  }

  /**
   * @param {string} type
   * @param {unknown} detail
   * @param {boolean} [cancelable]
   * @returns {boolean} false when the host page called preventDefault
   */
  #emit(type, detail, cancelable = false) {
    return this.dispatchEvent(new CustomEvent(type, { detail, bubbles: true, composed: true, cancelable }));
  }
}

class SignInError extends Error {}

/**
 * A refusal's body as the contract writes it, or in words when the answer had none (a proxy's page).
 * @param {unknown} body
 * @returns {ErrorBody}
 */
function errorBody(body) {
  const error = /** @type {ErrorBody | null} */ (body);
  return error?.error ? error : { error: { code: "UNEXPECTED", message: "The sale answered unexpectedly." } };
}

/**
 * What went wrong, as an error body: not signed in, no connection, or the error itself.
 * @param {unknown} error
 * @returns {ErrorBody}
 */
function thrownBody(error) {
  if (error instanceof SignInError)
    return { error: { code: "UNAUTHENTICATED", message: "Sign in to the shop to buy." } };
  if (error instanceof NetworkError) return { error: { code: "NETWORK_ERROR", message: error.message } };
  return { error: { code: "UNEXPECTED", message: String(error) } };
}

/**
 * Minor units as money: 2500 usd → "$25.00".
 * @param {number} minor
 * @param {string} currency
 */
function formatMoney(minor, currency) {
  const format = new Intl.NumberFormat(document.documentElement.lang || undefined, {
    style: "currency",
    currency: currency.toUpperCase(),
  });
  return format.format(minor / 10 ** (format.resolvedOptions().maximumFractionDigits ?? 2));
}

/** @param {number} seconds "1:02:03" or "4:05" */
function duration(seconds) {
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = String(seconds % 60).padStart(2, "0");
  return h > 0 ? `${h}:${String(m).padStart(2, "0")}:${s}` : `${m}:${s}`;
}

if (!customElements.get("flashgate-buy")) customElements.define("flashgate-buy", FlashgateBuy);
