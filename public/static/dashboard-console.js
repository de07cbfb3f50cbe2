// The dashboard's console: runs a sale without curl. Create and edit a SKU (every field of
// PUT /admin/skus/:sku, sizes and early access tiers included), pause and resume, archive; mint a tier's access codes
// (shown once); payments owed back; find an order. A change to a
// live sale is confirmed in a dialog that names it, and the server's answer is shown. Loaded after
// dashboard.js, whose helpers ($, admin, errorText, field, money, countdown, refresh) and types it uses.

/**
 * @typedef {typeof SKU_FIELDS[number]} SkuField
 * @typedef {{ [K in SkuField]?: string | number | null }} SkuValues
 * @typedef {{ reservationId: string, sku: string, userId: string, quantity: number, status: string,
 *   amount: number | null, currency: string | null, createdAt: string, updatedAt: string }} Order
 * @typedef {{ orders: Order[] }} OrderList
 * @typedef {{ eventId: string, source: string, reservationId: string, sku: string, userId: string,
 *   amount: number, currency: string, outcome: string, reason: string | null, receivedAt: string,
 *   refund?: { status: "refunded" | "pending" | "failed", via: "stripe" | "marked", id: string | null, at: string } | null }} Payment
 * @typedef {{ payments: Payment[], next: string }} PaymentList
 * @typedef {{ name: string, startsAt: string | null, claim?: { name: string, value: string } }} Tier
 * @typedef {{ tier: string, codes: string[] }} AccessCodes
 * @typedef {{ id: string, name?: string, totalStock: number | string | null }} SizeBody
 */

/** The fields of the SKU form, in the order of PUT /admin/skus/:sku's body (API.md). */
const SKU_FIELDS = /** @type {const} */ ([
  "name",
  "totalStock",
  "perUserLimit",
  "holdSeconds",
  "price",
  "currency",
  "startsAt",
  "endsAt",
  "shards",
  "openingWindowMs",
  "status",
]);
/** @type {Set<string>} */
const NUMBER_FIELDS = new Set(["totalStock", "perUserLimit", "holdSeconds", "price", "shards", "openingWindowMs"]);
/** @type {Set<string>} */
const TIME_FIELDS = new Set(["startsAt", "endsAt"]);
/**
 * What a new SKU's form starts with: the API's defaults, and a price in dollars.
 * @type {SkuValues}
 */
const NEW_SKU = {
  name: "",
  totalStock: "",
  perUserLimit: 1,
  holdSeconds: 900,
  price: null,
  currency: "usd",
  startsAt: null,
  endsAt: null,
  shards: 1,
  openingWindowMs: 0,
  status: "on_sale",
};
const REFUNDS_LIMIT = 1000;

/** The SKU views last rendered, by id: what the edit form starts from and compares with. @type {Map<string, AdminSku>} */
const views = new Map();
/** The SKU being edited (its view), or null for a new one. @type {AdminSku | null} */
let editing = null;

// Small helpers ---------------------------------------------------------------------------------

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {string} [className]
 * @param {string} [text]
 */
function element(tag, className, text) {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text !== undefined) el.textContent = text;
  return el;
}

/** "2026-12-03T10:00:00.000Z" as a datetime-local input's value, in this browser's time. */
/** @param {string | number | null | undefined} iso */
function toLocalInput(iso) {
  if (!iso) return "";
  const d = new Date(iso);
  /** @param {number} n */
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** A datetime-local value (this browser's time) as the ISO time the API takes; "" is null. */
/** @param {string} value */
function fromLocalInput(value) {
  if (!value) return null;
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? value : d.toISOString();
}

/**
 * A field's value as an operator reads it, for the confirm dialog.
 * @param {string} key
 * @param {unknown} value
 * @param {{ currency?: unknown } | null} view
 */
function shown(key, value, view) {
  if (value === null || value === undefined || value === "") {
    if (key === "price") return "no price";
    if (key === "startsAt") return "no start";
    if (key === "endsAt") return "no end";
    return "none";
  }
  if (TIME_FIELDS.has(key)) return new Date(String(value)).toLocaleString();
  if (key === "price") return money(Number(value), String(view?.currency ?? "usd"));
  if (key === "status") return String(value).replace("_", " ");
  return String(value);
}

/** @type {Record<string, string>} */
const LABELS = {
  name: "Name",
  totalStock: "Total stock",
  perUserLimit: "Per shopper",
  holdSeconds: "Hold (seconds)",
  price: "Price",
  currency: "Currency",
  startsAt: "Starts",
  endsAt: "Ends",
  shards: "Shards",
  openingWindowMs: "Opening draw (ms)",
  status: "Status",
  access: "Early access",
  variants: "Sizes",
};
/** API.md v1.4 "Sizes": at most this many sizes. */
const MAX_SIZES = 100;
/** API.md v1.3 "Early access": at most this many tiers. */
const MAX_TIERS = 8;

/** Whether shoppers can buy this SKU right now: a change to it reaches them at once. */
/** @param {AdminSku} view */
function isLive(view) {
  if (view.status !== "on_sale") return false;
  return view.phase === undefined ? true : view.phase === "open";
}

/**
 * @param {"ok" | "error" | ""} kind
 * @param {string} text
 */
function sayConsole(kind, text) {
  const message = $("console-message");
  message.dataset.kind = kind;
  message.textContent = text;
}

/** A result in the SKU's own card (its status line), or in the section's when the card is gone. */
/**
 * @param {string} sku
 * @param {"ok" | "error"} kind
 * @param {string} text
 */
function sayOnCard(sku, kind, text) {
  const card = cards.get(sku);
  if (!card) {
    sayConsole(kind, text);
    return;
  }
  sayConsole("", ""); // the section's line would be an older answer
  const message = field(card, "message");
  message.dataset.kind = kind;
  message.textContent = text;
  message.scrollIntoView({ block: "nearest" });
}

// The confirm dialog ------------------------------------------------------------------------------

/**
 * Asks before a change is sent: `title`, the lines saying what will change, and the button's words.
 * With `typed`, the button stays off until that word is typed (an archive cannot be undone).
 * Resolves true (confirmed) or false (kept as it is). `send` runs on confirm; an error it returns
 * is shown in the dialog, which stays open.
 * @param {{ title: string, lines: string[], action: string, typed?: string | null,
 *   send: () => Promise<string | null> }} change
 * @returns {Promise<boolean>}
 */
function confirmChange({ title, lines, action, typed = null, send }) {
  const dialog = $("confirm-dialog");
  $("confirm-title").textContent = title;
  const list = element("ul", "changes");
  for (const line of lines) list.append(element("li", "", line));
  $("confirm-what").replaceChildren(list);
  $("confirm-error").textContent = "";
  const ok = $("confirm-ok");
  ok.textContent = action;
  ok.disabled = typed !== null;
  $("confirm-type").hidden = typed === null;
  $("confirm-type-word").textContent = typed ?? "";
  $("confirm-type-input").value = "";
  $("confirm-type-input").oninput = () => {
    ok.disabled = $("confirm-type-input").value.trim() !== typed;
  };
  return new Promise((resolve) => {
    /** @param {boolean} confirmed */
    const finish = (confirmed) => {
      ok.onclick = null;
      $("confirm-cancel").onclick = null;
      dialog.onclose = null;
      if (dialog.open) dialog.close();
      resolve(confirmed);
    };
    ok.onclick = async () => {
      ok.disabled = true;
      const error = await send();
      ok.disabled = false;
      if (error) $("confirm-error").textContent = error;
      else finish(true);
    };
    $("confirm-cancel").onclick = () => finish(false);
    dialog.onclose = () => finish(false); // Escape
    dialog.showModal();
    // The safe choice has the focus: Enter or a stray click keeps things as they are.
    $(typed === null ? "confirm-cancel" : "confirm-type-input").focus();
  });
}

// Card actions: pause, resume, archive ------------------------------------------------------------

/** Wires a card's buttons once, and labels them for this SKU and its state. */
/**
 * @param {HTMLElement} card
 * @param {AdminSku} view
 */
function renderSkuActions(card, view) {
  views.set(view.sku, view);
  const name = `${view.name} (${view.sku})`;
  const pause = action(card, "pause");
  const paused = view.status === "paused";
  pause.textContent = paused ? "Resume…" : "Pause…";
  pause.setAttribute("aria-label", `${paused ? "Resume" : "Pause"} the sale of ${name}`);
  action(card, "edit").setAttribute("aria-label", `Edit ${name}`);
  const archiveButton = action(card, "archive");
  archiveButton.setAttribute("aria-label", `Archive ${name}`);
  // Early access: the tiers on the card, and minting their codes.
  const tiers = view.access ?? [];
  const mint = action(card, "mint");
  mint.hidden = tiers.length === 0;
  mint.setAttribute("aria-label", `Mint access codes for ${name}`);
  field(card, "access-label").hidden = tiers.length === 0;
  const shownTiers = field(card, "access");
  shownTiers.hidden = tiers.length === 0;
  const tiersLine = `${plural(tiers.length, "tier")}: ${tiersText(tiers)}`;
  if (shownTiers.textContent !== tiersLine) shownTiers.textContent = tiersLine;
  if (card.dataset.wired) return;
  card.dataset.wired = "true";
  const sku = view.sku;
  // The view of the last render: the card's buttons are wired once.
  const latest = () => views.get(sku) ?? view;
  action(card, "edit").addEventListener("click", () => openSkuForm(latest()));
  pause.addEventListener("click", () => pauseOrResume(latest(), pause));
  archiveButton.addEventListener("click", () => archive(latest(), archiveButton));
  mint.addEventListener("click", () => openMint(latest(), mint));
}

// Access codes: minted, shown once --------------------------------------------------------------

/** The SKU and button the mint dialog is open for (no code is kept here: they live in the dialog's list). */
/** @type {{ view: AdminSku, button: HTMLButtonElement } | null} */
let minting = null;

/**
 * Opens the mint dialog for a SKU's tiers.
 * @param {AdminSku} view
 * @param {HTMLButtonElement} button
 */
function openMint(view, button) {
  minting = { view, button };
  $("mint-title").textContent = `Mint access codes for ${view.name} (${view.sku})`;
  $("mint-tier").replaceChildren(
    ...(view.access ?? []).map((t) => {
      const option = element("option", "", `${t.name} (opens ${new Date(t.startsAt).toLocaleString()})`);
      option.value = t.name;
      return option;
    }),
  );
  $("mint-count").removeAttribute("aria-invalid");
  $("mint-error").textContent = "";
  $("mint-form").hidden = false;
  forgetCodes();
  $("mint-dialog").showModal();
  $("mint-tier").focus();
}

/** Takes the codes off the page: the list is emptied, nothing else held them. */
function forgetCodes() {
  $("mint-codes").replaceChildren();
  $("mint-said").textContent = "";
  $("mint-shown").hidden = true;
}

/** The codes the dialog shows now (the page keeps them nowhere else). */
function shownCodes() {
  return [...$("mint-codes").querySelectorAll("code")].map((c) => c.textContent ?? "");
}

/** @param {SubmitEvent} event */
async function mintCodes(event) {
  event.preventDefault();
  if (!minting) return;
  const { view } = minting;
  const tier = $("mint-tier").value;
  const raw = $("mint-count").value.trim();
  const count = /^\d+$/.test(raw) ? Number(raw) : Number.NaN;
  if (!(count >= 1 && count <= 10000)) {
    $("mint-error").textContent = "How many: a whole number from 1 to 10000.";
    $("mint-count").setAttribute("aria-invalid", "true");
    $("mint-count").focus();
    return;
  }
  $("mint-count").removeAttribute("aria-invalid");
  $("mint-ok").disabled = true;
  $("mint-error").textContent = "";
  const answer = /** @type {Answer<AccessCodes>} */ (
    await admin("POST", `/admin/skus/${encodeURIComponent(view.sku)}/access-codes`, { tier, count })
  );
  $("mint-ok").disabled = false;
  if (!answer.ok) {
    $("mint-error").textContent = `The gateway refused: ${errorText(answer)}`;
    $("mint-error").scrollIntoView({ block: "nearest" });
    return;
  }
  const { codes } = answer.json;
  $("mint-codes").replaceChildren(
    ...codes.map((code) => {
      const li = element("li");
      li.append(element("code", "", code));
      return li;
    }),
  );
  $("mint-shown-title").textContent =
    `${plural(codes.length, "access code")} for tier ${answer.json.tier} of ${view.sku}`;
  $("mint-form").hidden = true;
  $("mint-shown").hidden = false;
  $("mint-shown-title").focus();
}

/** The codes as a CSV file (one `tier,code` line each), downloaded through a Blob URL. */
function downloadCodes() {
  if (!minting) return;
  const tier = $("mint-tier").value;
  const codes = shownCodes();
  const csv = codes.map((code) => `${tier},${code}\n`).join("");
  const url = URL.createObjectURL(new Blob([csv], { type: "text/csv" }));
  const link = element("a");
  link.href = url;
  link.download = `${minting.view.sku}-${tier}-codes.csv`;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
  $("mint-said").textContent = `Downloading ${link.download} (${plural(codes.length, "code")}).`;
}

async function copyCodes() {
  const codes = shownCodes();
  try {
    await navigator.clipboard.writeText(codes.join("\n"));
    $("mint-said").textContent = `${plural(codes.length, "code")} on the clipboard, one a line.`;
  } catch {
    $("mint-said").textContent = "This browser refused the clipboard: select the codes above, or download the CSV.";
  }
}

/**
 * @param {AdminSku} view
 * @param {HTMLButtonElement} button
 */
async function pauseOrResume(view, button) {
  const pausing = view.status !== "paused";
  const name = `${view.name} (${view.sku})`;
  const held =
    view.stock.held === 0
      ? "No unit is held now."
      : view.stock.held === 1
        ? "The 1 unit held now keeps its course: it can still be paid until it lapses."
        : `The ${view.stock.held} units held now keep their course: they can still be paid until they lapse.`;
  const available = view.stock.available;
  const lines = pausing
    ? [
        `Status: on sale → paused. Shoppers can no longer get a purchase token or reserve; the storefront says the sale is paused.`,
        held,
        "Nothing else changes: stock, price and times stay.",
      ]
    : [
        `Status: paused → on sale. Shoppers can buy again${view.phase === "scheduled" ? " from the sale's start" : " at once"}; ${plural(available, "unit")} ${available === 1 ? "is" : "are"} available.`,
      ];
  const status = pausing ? "paused" : "on_sale";
  // Set by `send` (the closure the dialog calls): typed so, the checker does not take it for null.
  let answer = /** @type {Answer<AdminSku> | null} */ (null);
  const confirmed = await confirmChange({
    title: `${pausing ? "Pause" : "Resume"} the sale of ${name}?`,
    lines,
    action: pausing ? `Pause ${view.sku}` : `Resume ${view.sku}`,
    send: async () => {
      const answered = /** @type {Answer<AdminSku>} */ (
        await admin("PUT", `/admin/skus/${encodeURIComponent(view.sku)}`, { status })
      );
      answer = answered;
      return answered.ok ? null : `The gateway refused: ${errorText(answered)}`;
    },
  });
  button.focus();
  if (!confirmed || !answer) return;
  sayOnCard(
    view.sku,
    "ok",
    `${pausing ? "Paused" : "Resumed"}: the gateway now has ${view.sku} ${answer.json.status.replace("_", " ")}.`,
  );
  await refresh();
}

/**
 * @param {AdminSku} view
 * @param {HTMLButtonElement} button
 */
async function archive(view, button) {
  const name = `${view.name} (${view.sku})`;
  const { available, held } = view.stock;
  const holds =
    held === 0
      ? "No unit is held now"
      : `The ${plural(held, "unit")} held now ${held === 1 ? "keeps its" : "keep their"} course (paid, cancelled or lapsed as usual)`;
  let answer = /** @type {Answer<AdminSku | null> | null} */ (null);
  const confirmed = await confirmChange({
    title: `Archive ${name}?`,
    lines: [
      `It stops being sold at once: its public page and its purchase routes answer "not found", ${plural(available, "available unit")} ${available === 1 ? "is" : "are"} no longer offered.`,
      `${holds}; its orders, feed entries and deliveries stay.`,
      `It cannot be undone: the id ${view.sku} cannot be used again.`,
    ],
    action: `Archive ${view.sku}`,
    typed: view.sku,
    send: async () => {
      const answered = /** @type {Answer<AdminSku | null>} */ (
        await admin("DELETE", `/admin/skus/${encodeURIComponent(view.sku)}`)
      );
      answer = answered;
      return answered.ok ? null : `The gateway refused: ${errorText(answered)}`;
    },
  });
  if (!confirmed) {
    button.focus();
    return;
  }
  // The archived list is asked at once (not with the slower panels, every 10 s): the SKU shows there
  // as the message says it is archived.
  archivedKey = "";
  await refreshArchived();
  sayConsole("ok", `Archived: ${name} is ${answer?.json?.status ?? "archived"} and no longer sold.`);
  $("new-sku").focus(); // its card (and the button) leave the page
  await refresh();
}

// The SKU form: create and edit -------------------------------------------------------------------

/**
 * The form's input for a field (f-status is a select).
 * @param {string} key
 */
const input = (key) => /** @type {HTMLInputElement | HTMLSelectElement} */ ($(`f-${key}`));

function clearFieldErrors() {
  $("sku-form-error").textContent = "";
  for (const key of ["sku", ...SKU_FIELDS]) {
    const el = input(key);
    el.removeAttribute("aria-invalid");
    const hint = document.getElementById(`f-${key}-hint`)
      ? `f-${key}-hint`
      : TIME_FIELDS.has(key)
        ? "f-time-hint"
        : null;
    if (hint) el.setAttribute("aria-describedby", hint);
    else el.removeAttribute("aria-describedby");
    document.getElementById(`f-${key}-error`)?.remove();
  }
  for (const box of [$("f-access"), $("f-variants")]) {
    for (const el of [box, ...box.querySelectorAll("[aria-invalid]")]) {
      if (!el.hasAttribute("aria-invalid")) continue;
      el.removeAttribute("aria-invalid");
      const hint = el === box ? `${box.id}-hint` : /** @type {HTMLElement} */ (el).dataset.hint;
      if (hint) el.setAttribute("aria-describedby", hint);
      else el.removeAttribute("aria-describedby");
    }
    for (const p of box.querySelectorAll(".field-error")) p.remove();
  }
  for (const tr of $("f-variants-list").querySelectorAll("tr.size-error")) tr.remove();
}

/**
 * The server's word on one field, under its input, which it describes and marks invalid.
 * @param {string} key
 * @param {string} message
 */
function fieldError(key, message) {
  const el = document.getElementById(`f-${key}`); // the server may name a field the form has not
  if (!el) return false;
  let p = document.getElementById(`f-${key}-error`);
  if (!p) {
    p = element("p", "field-error");
    p.id = `f-${key}-error`;
    (el.closest(".field") ?? el).append(p);
  }
  p.textContent = message;
  el.setAttribute("aria-invalid", "true");
  const described = (el.getAttribute("aria-describedby") ?? "").split(" ").filter(Boolean);
  if (!described.includes(p.id)) el.setAttribute("aria-describedby", [p.id, ...described].join(" "));
  return true;
}

/**
 * An error answer, at the fields it names: a 400's `details.fields` (`{path, message}`), else each
 * field the message names (a 409 says "totalStock …"). The whole message also heads the form.
 */
/** @param {Answer} answer */
function showFormError(answer) {
  $("sku-form-error").textContent = `The gateway refused: ${errorText(answer)}`;
  const error = apiError(answer);
  const named = error?.details?.fields;
  /** @type {string | null} */
  let first = null;
  if (Array.isArray(named)) {
    for (const { path, message } of named) {
      // variants.1.totalStock is the second size sent: its row's input (only changed rows are sent).
      const size = /^variants\.(\d+)(?:\.(\w+))?/.exec(String(path));
      if (size) {
        const row = sentSizeRows[Number(size[1])] ?? Number(size[1]);
        const part = ["id", "name", "totalStock"].includes(size[2] ?? "") ? String(size[2]) : "id";
        if (sizeError(row, part, message) && !first) first = `variants-${row}-${part}`;
        continue;
      }
      // access.0.startsAt is the input f-access-0-startsAt; a path the form has no input for falls
      // back to its first part (access: the tiers' fieldset).
      const parts = String(path).split(".");
      const key = [parts.join("-"), parts[0] ?? ""].find((k) => document.getElementById(`f-${k}`)) ?? "";
      if (fieldError(key, message) && !first) first = key;
    }
  }
  // A 409 of a size cut below what it has held and sold names the size (details.variant): said at its stock.
  const variant = error?.details?.variant;
  if (!first && typeof variant === "string") {
    const i = sizeRows().findIndex((row) => sizeInput(row, "id").value.trim() === variant);
    const taken = Number(error?.details?.heldOrSold ?? 0);
    const why = `Below the ${plural(taken, "unit")} of ${variant} held or sold: set at least ${taken}.`;
    if (i >= 0 && sizeError(i, "totalStock", why)) first = `variants-${i}-totalStock`;
  }
  // A 409 about a tier's opening (window_open, draw_pending) names the tier: said at its time, shortly
  // (the form's head has the gateway's whole message, with the times).
  const tier = /Early access tier ([A-Za-z0-9_-]+)/.exec(error?.message ?? "")?.[1];
  // (One about openingWindowMs names a tier too, but is the window's length: left to the loop below.)
  if (!first && tier && !/\bopeningWindowMs\b/.test(error?.message ?? "")) {
    const i = tierRows().findIndex((row) => tierInput(row, "name").value.trim() === tier);
    const state = error?.details?.state;
    const why =
      state === "window_open"
        ? "Its opening window is open: the tier cannot change until the window closes and its draw is decided. Try again then."
        : state === "draw_pending"
          ? "Its draw is not decided yet (moments after its window closed): the tier cannot change until it is. Try again then."
          : (error?.message ?? "");
    if (i >= 0 && fieldError(`access-${i}-startsAt`, why)) first = `access-${i}-startsAt`;
  }
  if (!first) {
    // A 409 names the field in its message, or carries its figure in details ({totalStock, heldOrSold}).
    const message = error?.message ?? "";
    const details = error?.details ?? {};
    for (const key of SKU_FIELDS) {
      const named = new RegExp(`\\b${key}\\b`).test(message) || details[key] !== undefined;
      if (named && fieldError(key, message) && !first) first = key;
    }
  }
  (first ? /** @type {HTMLElement} */ ($(`f-${first}`)) : $("sku-form-error")).focus?.();
  if (!first) $("sku-form-error").scrollIntoView({ block: "nearest" });
}

/** @param {AdminSku | null} view */
function openSkuForm(view) {
  editing = view ?? null;
  /** @type {SkuValues} */
  const values = view ?? NEW_SKU;
  clearFieldErrors();
  $("sku-dialog-title").textContent = view ? `Edit ${view.name} (${view.sku})` : "New SKU";
  $("sku-save").textContent = view ? "Save changes…" : "Create";
  $("f-sku").value = view ? view.sku : "";
  $("f-sku").readOnly = view !== undefined && view !== null;
  const skuField = /** @type {HTMLElement | null} */ ($("f-sku").closest(".field"));
  if (skuField) skuField.hidden = Boolean(view);
  for (const key of SKU_FIELDS) {
    const value = key === "totalStock" && view ? view.stock.total : values[key];
    input(key).value = TIME_FIELDS.has(key) ? toLocalInput(value) : String(value ?? "");
  }
  $("f-zone").textContent = Intl.DateTimeFormat().resolvedOptions().timeZone;
  $("f-variants-list").replaceChildren();
  for (const size of view?.variants ?? []) addSizeRow(size);
  sizesChanged();
  $("f-access-list").replaceChildren();
  for (const tier of view?.access ?? []) addTierRow(tier);
  // Claims are never shown back (API.md: views carry names and times only): said when there are tiers.
  $("f-access-claims").hidden = !view?.access?.length;
  tiersChanged();
  updatePriceHint();
  $("sku-dialog").showModal();
  input(view ? "name" : "sku").focus();
}

// Sizes in the SKU form (API.md v1.4 "Sizes (variants)") ----------------------------------------

/** The row of each size sent in the last PUT, by its place in `variants` (a 400's variants.<i>). @type {number[]} */
let sentSizeRows = [];

/** The form's size rows, in order (an error's row between them is not one). */
function sizeRows() {
  return /** @type {HTMLTableRowElement[]} */ ([...$("f-variants-list").querySelectorAll("tr.size-row")]);
}

/**
 * A size row's input: id, name, totalStock.
 * @param {HTMLElement} row
 * @param {string} part
 */
function sizeInput(row, part) {
  return /** @type {HTMLInputElement} */ (row.querySelector(`[data-part="${part}"]`));
}

/**
 * A size's row: its id (fixed once saved), name and stock to edit, held and sold as the SKU has them.
 * @param {{ id: string, name: string, stock: StockCounts }} [size]
 */
function addSizeRow(size) {
  const row = element("tr", "size-row");
  /**
   * @param {string} part
   * @param {string} value
   */
  const cell = (part, value) => {
    const td = element("td");
    const el = element("input");
    el.dataset.part = part;
    el.autocomplete = "off";
    el.value = value;
    if (part === "totalStock") {
      el.type = "number";
      el.min = "0";
      el.step = "1";
    } else el.maxLength = part === "id" ? 32 : 64;
    if (part !== "name") el.addEventListener("input", sizesChanged);
    td.append(el);
    return td;
  };
  row.append(
    cell("id", size?.id ?? ""),
    cell("name", size && size.name !== size.id ? size.name : ""),
    cell("totalStock", size ? String(size.stock.total) : ""),
    element("td", "figure", size ? String(size.stock.held) : "0"),
    element("td", "figure", size ? String(size.stock.sold) : "0"),
  );
  const last = element("td");
  if (size) {
    row.dataset.saved = size.id;
    sizeInput(row, "id").readOnly = true;
  } else {
    // A size not saved yet can go again; a saved one cannot (stock 0 takes it off sale).
    const remove = element("button", "secondary small remove-size", "×");
    remove.type = "button";
    remove.dataset.part = "remove";
    remove.addEventListener("click", () => {
      const at = sizeRows().indexOf(row);
      row.remove();
      sizesChanged();
      const next = sizeRows()[Math.min(at, sizeRows().length - 1)];
      (next ? sizeInput(next, "id") : $("f-variants-add")).focus();
    });
    last.append(remove);
  }
  row.append(last);
  $("f-variants-list").append(row);
  return row;
}

/**
 * Numbers the rows again (f-variants-<i>-stock is row i), names each input with its size ("Stock of
 * size 42"), and, once the SKU has sizes, shows the total stock as their sum (it is not sent).
 */
function sizesChanged() {
  const rows = sizeRows();
  let sum = 0;
  rows.forEach((row, i) => {
    const id = sizeInput(row, "id").value.trim();
    const which = id ? `size ${id}` : `size ${i + 1}`;
    const names = { id: `Size id, row ${i + 1}`, name: `Name of ${which}`, totalStock: `Stock of ${which}` };
    for (const [part, label] of Object.entries(names)) {
      const el = sizeInput(row, part);
      el.id = `f-variants-${i}-${part}`;
      el.setAttribute("aria-label", label);
    }
    row.querySelector('[data-part="remove"]')?.setAttribute("aria-label", `Remove ${which} (not saved yet)`);
    const stock = sizeInput(row, "totalStock").value.trim();
    if (/^\d+$/.test(stock)) sum += Number(stock);
  });
  $("f-variants-table").hidden = rows.length === 0;
  $("f-variants-table").classList.toggle(
    "has-new",
    rows.some((row) => !row.dataset.saved),
  );
  $("f-variants-count").textContent =
    rows.length === 0 ? "(none: one stock)" : `(${plural(rows.length, "size")} of ${MAX_SIZES})`;
  $("f-variants-add").hidden = rows.length >= MAX_SIZES;
  const total = /** @type {HTMLInputElement} */ (input("totalStock"));
  total.readOnly = rows.length > 0;
  if (rows.length > 0) total.value = String(sum);
  $("f-totalStock-hint").textContent =
    rows.length > 0
      ? "The sum of the sizes' stock (edit each size below)."
      : "Units in all, held and sold ones included.";
}

/**
 * The sizes to send with the rows they come from: every row for a new SKU, else the rows added or
 * changed (API.md v1.4: a PUT listing some sizes changes those and keeps the rest).
 * @param {AdminSku | null} view
 * @returns {{ sizes: SizeBody[], rows: number[] }}
 */
function formSizes(view) {
  /** @type {SizeBody[]} */
  const sizes = [];
  /** @type {number[]} */
  const rows = [];
  sizeRows().forEach((row, i) => {
    const id = sizeInput(row, "id").value.trim();
    const name = sizeInput(row, "name").value.trim();
    const raw = sizeInput(row, "totalStock").value.trim();
    const totalStock = raw === "" ? null : /^\d+$/.test(raw) ? Number(raw) : raw;
    const old = view?.variants?.find((v) => v.id === row.dataset.saved);
    if (old && old.stock.total === totalStock && (name === "" || name === old.name)) return;
    /** @type {SizeBody} */
    const size = { id, totalStock };
    if (name) size.name = name;
    sizes.push(size);
    rows.push(i);
  });
  return { sizes, rows };
}

/**
 * The server's word on one input of a size row, in a row of its own under it.
 * @param {number} i
 * @param {string} part
 * @param {string} message
 */
function sizeError(i, part, message) {
  const el = document.getElementById(`f-variants-${i}-${part}`);
  const row = el?.closest("tr");
  if (!el || !row) return false;
  const id = `f-variants-${i}-${part}-error`;
  let p = document.getElementById(id);
  if (!p) {
    let after = /** @type {Element} */ (row);
    while (after.nextElementSibling?.classList.contains("size-error")) after = after.nextElementSibling;
    const tr = element("tr", "size-error");
    const td = element("td");
    td.colSpan = 6;
    p = element("p", "field-error");
    p.id = id;
    td.append(p);
    tr.append(td);
    after.after(tr);
  }
  p.textContent = message;
  el.setAttribute("aria-invalid", "true");
  el.setAttribute("aria-describedby", id);
  return true;
}

/**
 * The confirm dialog's lines of the sizes sent.
 * @param {AdminSku} view
 * @param {SizeBody[]} sizes
 */
function sizeLines(view, sizes) {
  return sizes.map((size) => {
    const old = view.variants?.find((v) => v.id === size.id);
    if (!old) return `New size ${size.id}${size.name ? ` (${size.name})` : ""}: stock ${size.totalStock ?? "none"}`;
    const parts = [];
    if (size.name !== undefined && size.name !== old.name) parts.push(`name ${old.name} → ${size.name}`);
    if (size.totalStock !== old.stock.total) {
      let part = `stock ${old.stock.total} → ${size.totalStock}`;
      if (typeof size.totalStock === "number" && size.totalStock < old.stock.total) {
        const left = size.totalStock - old.stock.held - old.stock.sold;
        part += ` (lowers the stock: ${left < 0 ? "below what is held and sold, which the gateway refuses" : `${left} left to sell`})`;
      }
      parts.push(part);
    }
    return `Size ${size.id}: ${parts.join(", ")}`;
  });
}

// Early access tiers in the SKU form (API.md v1.3) ------------------------------------------------

/** The form's tier rows, in the order they are sent (a 400's access.<i> is the i-th). */
function tierRows() {
  return /** @type {HTMLElement[]} */ ([...$("f-access-list").children]);
}

/**
 * A tier row's input: name, startsAt, claim-name, claim-value.
 * @param {HTMLElement} row
 * @param {string} part
 */
function tierInput(row, part) {
  return /** @type {HTMLInputElement} */ (row.querySelector(`[data-part="${part}"]`));
}

/**
 * A labelled input of a tier row.
 * @param {string} part
 * @param {string} label
 * @param {string} type
 * @param {string} value
 */
function tierField(part, label, type, value) {
  const wrap = element("div", `field tier-${part}`);
  const text = element("label");
  text.append(element("span", "", label), " ");
  const el = element("input");
  el.type = type;
  el.autocomplete = "off";
  el.dataset.part = part;
  el.value = value;
  if (type === "datetime-local") el.step = "1";
  if (part === "name") el.maxLength = 32;
  text.append(el);
  wrap.append(text);
  return wrap;
}

/**
 * A tier's row: its name, when it opens, its claim (optional) and a button to remove it.
 * @param {Partial<Tier>} [tier]
 */
function addTierRow(tier = {}) {
  const row = element("li", "tier");
  const remove = element("button", "secondary small", "Remove");
  remove.type = "button";
  remove.dataset.part = "remove";
  remove.addEventListener("click", () => {
    const rows = tierRows();
    const at = rows.indexOf(row);
    row.remove();
    tiersChanged();
    // The focus goes to the next tier's remove button, else the previous one's, else Add a tier.
    const next = tierRows()[Math.min(at, tierRows().length - 1)];
    (next ? /** @type {HTMLElement} */ (next.querySelector('[data-part="remove"]')) : $("f-access-add")).focus();
  });
  const head = element("div", "tier-head");
  head.append(element("h3", "", "Tier"), remove);
  row.append(
    head,
    tierField("name", "Tier name", "text", tier.name ?? ""),
    tierField("startsAt", "Opens", "datetime-local", toLocalInput(tier.startsAt)),
    tierField("claim-name", "Claim name (optional)", "text", tier.claim?.name ?? ""),
    tierField("claim-value", "Claim value", "text", tier.claim?.value ?? ""),
  );
  $("f-access-list").append(row);
  return row;
}

/**
 * Numbers the rows again after one was added or removed: their ids follow the order they are sent in
 * (f-access-<i>-startsAt is the input of access.<i>.startsAt), their labels say which tier they are.
 */
function tiersChanged() {
  const rows = tierRows();
  rows.forEach((row, i) => {
    const n = i + 1;
    const name = tierInput(row, "name").value.trim();
    const title = /** @type {HTMLElement} */ (row.querySelector("h3"));
    title.textContent = `Tier ${n}${name ? `: ${name}` : ""}`;
    title.id = `f-access-${i}-title`;
    for (const part of ["name", "startsAt", "claim-name", "claim-value"]) {
      const el = tierInput(row, part);
      el.id = `f-access-${i}-${part}`;
      // Named by its label and its tier ("Opens, Tier 2: friends"): every row has the same labels.
      const label = /** @type {HTMLElement} */ (el.closest("label")?.querySelector("span"));
      label.id = `f-access-${i}-${part}-label`;
      el.setAttribute("aria-labelledby", `${label.id} ${title.id}`);
      // The time hint (this browser's time) describes the opening, as it does the sale's times.
      if (part === "startsAt") el.dataset.hint = "f-time-hint";
      if (!el.getAttribute("aria-invalid")) {
        if (el.dataset.hint) el.setAttribute("aria-describedby", el.dataset.hint);
        else el.removeAttribute("aria-describedby");
      }
      el.closest(".field")?.setAttribute("data-key", `access-${i}-${part}`);
    }
    const remove = /** @type {HTMLElement} */ (row.querySelector('[data-part="remove"]'));
    remove.setAttribute("aria-label", `Remove tier ${n}${name ? ` (${name})` : ""}`);
    if (!row.dataset.wired) {
      row.dataset.wired = "true";
      tierInput(row, "name").addEventListener("input", tiersChanged);
    }
  });
  $("f-access-count").textContent =
    rows.length === 0 ? "(no tier)" : `(${plural(rows.length, "tier")} of ${MAX_TIERS})`;
  const add = $("f-access-add");
  add.hidden = rows.length >= MAX_TIERS;
}

/** The tiers as the API takes them: the claim only when one of its two fields is typed. */
function formTiers() {
  return tierRows().map((row) => {
    const claimName = tierInput(row, "claim-name").value.trim();
    const claimValue = tierInput(row, "claim-value").value.trim();
    /** @type {Tier} */
    const tier = {
      name: tierInput(row, "name").value.trim(),
      startsAt: fromLocalInput(tierInput(row, "startsAt").value.trim()),
    };
    if (claimName || claimValue) tier.claim = { name: claimName, value: claimValue };
    return tier;
  });
}

/**
 * The tiers to send for an edit, or null when they are as the SKU has them (names and times, to the
 * second the form shows; a claim typed is a change, the view never showing one). A time within the
 * same second as the SKU's is sent as the SKU's, so a kept tier is never moved by a millisecond.
 * @param {AdminSku} view
 * @param {Tier[]} tiers
 */
function changedTiers(view, tiers) {
  const before = view.access ?? [];
  /** @param {string | null} iso */
  const second = (iso) => (iso ? Math.floor(Date.parse(iso) / 1000) : null);
  const sent = tiers.map((t) => {
    const old = before.find((b) => b.name === t.name);
    return old && second(old.startsAt) === second(t.startsAt) ? { ...t, startsAt: old.startsAt } : t;
  });
  const same =
    sent.length === before.length &&
    sent.every((t, i) => !t.claim && t.name === before[i]?.name && t.startsAt === before[i]?.startsAt);
  return same ? null : sent;
}

/** The price hint says what the minor units typed are, in the currency typed. */
function updatePriceHint() {
  const raw = input("price").value;
  const currency = input("currency").value.trim() || "usd";
  const hint = $("f-price-hint");
  if (raw === "" || !/^\d+$/.test(raw)) {
    hint.textContent = "Minor units: cents for usd or eur (2500 = 25.00). Empty: no price.";
    return;
  }
  hint.textContent = `${raw} minor units = ${money(Number(raw), currency)} a unit.`;
}

/** The form's values, typed as the API takes them (numbers, ISO times, null for empty). */
function formValues() {
  /** @type {SkuValues} */
  const out = {};
  for (const key of SKU_FIELDS) {
    const raw = input(key).value.trim();
    if (NUMBER_FIELDS.has(key)) out[key] = raw === "" ? null : /^-?\d+$/.test(raw) ? Number(raw) : raw;
    else if (TIME_FIELDS.has(key)) out[key] = fromLocalInput(raw);
    else out[key] = raw;
  }
  // With sizes the total is their sum, which the gateway works out: not sent.
  if (sizeRows().length > 0) out.totalStock = null;
  return out;
}

/**
 * The view's value of a form field, in the form's terms.
 * @param {AdminSku} view
 * @param {SkuField} key
 * @returns {string | number | null}
 */
function current(view, key) {
  if (key === "totalStock") return view.stock.total;
  const value = view[key];
  if (TIME_FIELDS.has(key)) return value ? new Date(value).toISOString() : null;
  return value ?? null;
}

/** The PUT body of an edit: only what changed (API.md v1.3: a field left out keeps its value). */
/**
 * @param {AdminSku} view
 * @param {SkuValues} values
 */
function changedFields(view, values) {
  /** @type {SkuValues} */
  const body = {};
  for (const key of SKU_FIELDS) {
    let value = values[key];
    // An empty field the API cannot null keeps its value (only price and the times can be null).
    if (value === null && !["price", "startsAt", "endsAt"].includes(key)) continue;
    if (key === "name" && value === "") continue;
    // The form shows whole seconds: a time within the same second is the time the SKU has.
    /** @param {string | number | null} iso */
    const second = (iso) => Math.floor(Date.parse(String(iso)) / 1000);
    if (TIME_FIELDS.has(key) && value && current(view, key) && second(value) === second(current(view, key)))
      value = current(view, key);
    if (value !== current(view, key)) body[key] = value;
  }
  return body;
}

/**
 * The confirm dialog's lines: each change, and what it does to a live sale.
 * @param {AdminSku} view
 * @param {SkuValues} body
 */
function changeLines(view, body) {
  const lines = [];
  for (const key of SKU_FIELDS) {
    if (!(key in body)) continue;
    const value = body[key];
    let line = `${LABELS[key]}: ${shown(key, current(view, key), view)} → ${shown(key, value, { ...view, ...body })}`;
    if (key === "totalStock" && typeof value === "number" && value < view.stock.total) {
      const left = value - view.stock.held - view.stock.sold;
      line += ` (lowers the stock: ${left < 0 ? "below what is held and sold, which the gateway refuses" : `${left} left to sell`})`;
    }
    if (key === "shards") line += " (moves the stock between stock objects; refused while anything is held or sold)";
    if (key === "status" && value === "paused") line += " (shoppers can no longer buy)";
    if (key === "price" || key === "currency") line += " (holds already made are charged the new price)";
    lines.push(line);
  }
  const sizes = /** @type {{ variants?: SizeBody[] }} */ (body).variants;
  if (sizes) lines.push(...sizeLines(view, sizes));
  const tiers = /** @type {{ access?: Tier[] }} */ (body).access;
  if (tiers) {
    lines.push(`Early access: ${tiersText(view.access ?? [])} → ${tiersText(tiers)}`);
    const unclaimed = tiers.filter((t) => !t.claim && view.access?.some((old) => old.name === t.name));
    if (unclaimed.length > 0)
      lines.push(
        `${unclaimed.map((t) => t.name).join(", ")}: sent without a claim, so ${unclaimed.length === 1 ? "it admits" : "they admit"} by access code only (a claim set before is not shown by the gateway, nor kept).`,
      );
  }
  return lines;
}

/**
 * Tiers in words: "vip from 5 Dec, 10:00, friends from …", or "none".
 * @param {{ name: string, startsAt: string | null }[]} tiers
 */
function tiersText(tiers) {
  if (tiers.length === 0) return "no tier";
  return tiers
    .map((t) => `${t.name} from ${t.startsAt ? new Date(t.startsAt).toLocaleString() : "no time"}`)
    .join(", ");
}

/**
 * A change that needs confirming: to a sale shoppers can buy now, or one that takes stock or moves it.
 * @param {AdminSku} view
 * @param {SkuValues} body
 */
function needsConfirm(view, body) {
  if (isLive(view)) return true;
  // Tiers are sent whole: a claim the form cannot show is dropped, which the dialog says.
  if ("access" in body && (view.access?.length ?? 0) > 0) return true;
  if ("shards" in body || body.status === "paused") return true;
  const sizes = /** @type {{ variants?: SizeBody[] }} */ (body).variants ?? [];
  const cut = sizes.some((size) => {
    const old = view.variants?.find((v) => v.id === size.id);
    return old && typeof size.totalStock === "number" && size.totalStock < old.stock.total;
  });
  if (cut) return true;
  return typeof body.totalStock === "number" && body.totalStock < view.stock.total;
}

/** @param {SubmitEvent} event */
async function saveSku(event) {
  event.preventDefault();
  clearFieldErrors();
  const values = formValues();
  if (!editing) {
    const sku = input("sku").value.trim();
    if (!sku) {
      fieldError("sku", "A new SKU needs an id.");
      input("sku").focus();
      return;
    }
    // Created with what the form holds; empty optional fields are left to the API's defaults.
    /** @type {Record<string, string | number | Tier[] | SizeBody[]>} */
    const body = {};
    for (const [key, value] of Object.entries(values)) {
      if (value === null || value === "") continue;
      body[key] = value;
    }
    const { sizes, rows } = formSizes(null);
    sentSizeRows = rows;
    if (sizes.length > 0) body.variants = sizes;
    const tiers = formTiers();
    if (tiers.length > 0) body.access = tiers;
    $("sku-save").disabled = true;
    const answer = /** @type {Answer<AdminSku>} */ (await admin("PUT", `/admin/skus/${encodeURIComponent(sku)}`, body));
    $("sku-save").disabled = false;
    if (!answer.ok) {
      showFormError(answer);
      return;
    }
    $("sku-dialog").close();
    const made = answer.json.variants?.length ? ` in ${plural(answer.json.variants.length, "size")}` : "";
    sayConsole(
      "ok",
      `Created: ${answer.json.name} (${sku}), ${plural(answer.json.stock.total, "unit")}${made}, ${answer.json.status.replace("_", " ")}.`,
    );
    await refresh();
    const created = cards.get(sku);
    if (created) action(created, "edit")?.focus();
    return;
  }
  const view = editing;
  /** @type {SkuValues & { access?: Tier[], variants?: SizeBody[] }} */
  const body = changedFields(view, values);
  const { sizes, rows } = formSizes(view);
  sentSizeRows = rows;
  if (sizes.length > 0) body.variants = sizes;
  const tiers = changedTiers(view, formTiers());
  if (tiers) body.access = tiers;
  if (Object.keys(body).length === 0) {
    $("sku-form-error").textContent = "Nothing changed: every field has the value the SKU has now.";
    return;
  }
  const send = async () => admin("PUT", `/admin/skus/${encodeURIComponent(view.sku)}`, body);
  let answer = /** @type {Answer | null} */ (null);
  if (needsConfirm(view, body)) {
    const live = isLive(view) ? " It is on sale now: shoppers see the change at once." : "";
    const confirmed = await confirmChange({
      title: `Change ${view.name} (${view.sku})?${live}`,
      lines: changeLines(view, body),
      action: `Save the ${Object.keys(body).length === 1 ? "change" : "changes"}`,
      send: async () => {
        answer = await send();
        // A refusal is shown at the fields of the form, which stays open to correct them.
        return null;
      },
    });
    if (!confirmed) {
      $("sku-save").focus();
      return;
    }
  } else {
    $("sku-save").disabled = true;
    answer = await send();
    $("sku-save").disabled = false;
  }
  if (!answer) return;
  if (!answer.ok) {
    showFormError(answer);
    return;
  }
  $("sku-dialog").close();
  const said = Object.keys(body)
    .map((key) => (LABELS[key] ?? key).toLowerCase())
    .join(", ");
  sayOnCard(view.sku, "ok", `Saved: ${said} of ${view.sku} changed (the gateway answered ${answer.status}).`);
  await refresh();
  const saved = cards.get(view.sku);
  if (saved) action(saved, "edit")?.focus();
}

// Payments owed back --------------------------------------------------------------------------------

/** Why a payment could not be applied, in words (API.md v1.3 `reason`). */
/** @type {Record<string, string>} */
const REASONS = {
  amount_mismatch: "paid another amount than the order costs",
  currency_mismatch: "paid in another currency than the SKU's",
  already_paid: "a second payment for an order already paid",
  too_late: "came after the hold lapsed, when no unit was left",
  limit_exceeded: "came after the hold lapsed, when the buyer was at the per-shopper limit",
};

let refundsKey = "";

/** Still owed: payments flagged refund_required and not refunded (none, pending or failed; API.md v1.4). */
async function refreshRefunds() {
  const answer = /** @type {Answer<PaymentList>} */ (
    await admin("GET", `/admin/payments?outcome=refund_required&refunded=false&limit=${REFUNDS_LIMIT}`)
  );
  const error = $("refund-error");
  if (answer.status === 404 && apiError(answer)?.code === "NOT_FOUND") {
    error.textContent = "not available: this gateway does not list payments (contract v1.3)";
    return;
  }
  if (!answer.ok) {
    error.textContent = `GET /admin/payments: ${errorText(answer)}`;
    return;
  }
  error.textContent = "";
  const payments = answer.json.payments;
  const key = JSON.stringify(payments);
  if (key === refundsKey) return;
  refundsKey = key;
  $("refund-empty").hidden = payments.length > 0;
  const more = payments.length >= REFUNDS_LIMIT ? "+" : "";
  $("refund-count").textContent = payments.length === 0 ? "" : `(${payments.length}${more} to refund)`;
  const owed = $("refund-owed");
  owed.hidden = payments.length === 0;
  owed.textContent = `Still owed: ${owedTotals(payments)}.`;
  // Newest first: the feed is in the order received.
  $("refund-list").replaceChildren(...[...payments].reverse().map(refundItem));
}

/**
 * What is owed, summed per currency: "€50.00 to 2 buyers" or "€25.00 and $10.00 to 3 buyers".
 * @param {Payment[]} payments
 */
function owedTotals(payments) {
  /** @type {Map<string, number>} */
  const sums = new Map();
  for (const p of payments) sums.set(p.currency, (sums.get(p.currency) ?? 0) + p.amount);
  const amounts = [...sums].map(([currency, minor]) => money(minor, currency));
  const buyers = new Set(payments.map((p) => p.userId)).size;
  return `${amounts.join(" and ")} to ${plural(buyers, "buyer")}`;
}

/**
 * One payment owed back: whom, how much, why, and its refund's state and buttons.
 * @param {Payment} p
 */
function refundItem(p) {
  const li = element("li", "refund");
  li.dataset.id = p.reservationId;
  li.dataset.event = p.eventId;
  const amount = money(p.amount, p.currency);
  const what = element("p", "what");
  what.append(element("b", "", `Refund ${amount}`), element("span", "", ` to ${p.userId} · ${p.sku}`));
  const why = element("p", "", (p.reason && REASONS[p.reason]) ?? String(p.reason ?? "reason not given"));
  const where = element("p", "muted small");
  where.append(
    document.createTextNode(`received ${new Date(p.receivedAt).toLocaleString()} from ${p.source} · event `),
    element("code", "wrap", p.eventId),
    document.createTextNode(" · reservation "),
    element("code", "wrap", p.reservationId),
  );
  li.append(what, why, where);
  const refund = p.refund ?? null;
  const buttons = element("div", "row actions");
  const who = `${amount} to ${p.userId} (event ${p.eventId})`;
  if (refund?.status === "pending") {
    li.append(
      element(
        "p",
        "refund-state",
        `Refund pending at Stripe${refund.id ? ` (${refund.id})` : ""} since ${new Date(refund.at).toLocaleString()}.`,
      ),
    );
    // Stripe's refund events settle it; asking reads where it stands, when those events are not sent here.
    if (refund.via === "stripe" && refund.id) {
      const ask = element("button", "small secondary", "Ask Stripe again");
      ask.type = "button";
      ask.dataset.action = "refund-status";
      ask.setAttribute("aria-label", `Ask Stripe where the refund stands: ${who}`);
      ask.addEventListener("click", () => askStripe(p, amount, ask));
      buttons.append(ask);
      li.append(buttons);
    }
    return li;
  }
  if (refund?.status === "failed") {
    li.append(
      element(
        "p",
        "refund-state",
        `Stripe's last refund failed${refund.id ? ` (${refund.id})` : ""}: try again, or refund it elsewhere and mark it.`,
      ),
    );
  }
  if (p.source === "stripe") {
    const viaStripe = element("button", "small", "Refund via Stripe…");
    viaStripe.type = "button";
    viaStripe.dataset.action = "refund";
    viaStripe.setAttribute("aria-label", `Refund via Stripe: ${who}`);
    viaStripe.addEventListener("click", () => refundViaStripe(p, amount, viaStripe));
    buttons.append(viaStripe);
  }
  const marked = element("button", "small secondary", "Mark refunded…");
  marked.type = "button";
  marked.dataset.action = "mark-refunded";
  marked.setAttribute("aria-label", `Mark refunded: ${who}`);
  marked.addEventListener("click", () => markRefunded(p, amount, marked));
  buttons.append(marked);
  li.append(buttons);
  return li;
}

/**
 * @param {"ok" | "error"} kind
 * @param {string} text
 */
function sayRefunds(kind, text) {
  const message = $("refund-message");
  message.dataset.kind = kind;
  message.textContent = text;
}

/**
 * `POST /admin/payments/:eventId/refund`, confirmed first: Stripe refunds the payment in full.
 * @param {Payment} p
 * @param {string} amount
 * @param {HTMLButtonElement} button
 */
async function refundViaStripe(p, amount, button) {
  /** @type {Payment | null} */
  let done = null;
  const confirmed = await confirmChange({
    title: `Refund ${amount} to ${p.userId} via Stripe?`,
    lines: [
      `Stripe refunds the payment of event ${p.eventId} in full, to the card it came from.`,
      `Reservation ${p.reservationId} (${p.sku}) stays as it is.`,
    ],
    action: "Refund via Stripe",
    send: async () => {
      const answer = /** @type {Answer<Payment>} */ (
        await admin("POST", `/admin/payments/${encodeURIComponent(p.eventId)}/refund`)
      );
      if (!answer.ok) return errorText(answer);
      done = answer.json;
      return null;
    },
  });
  await afterRefund(confirmed, done, `${amount} to ${p.userId}`, button);
}

/**
 * `POST /admin/payments/:eventId/refund` on a refund pending at Stripe: the gateway asks Stripe where it
 * stands and records it. Nothing moves money, so nothing to confirm.
 * @param {Payment} p
 * @param {string} amount
 * @param {HTMLButtonElement} button
 */
async function askStripe(p, amount, button) {
  button.disabled = true;
  // The same route refunds a payment whose refund failed: if Stripe's event settled this one since the
  // list was read (it is read every 10 s), asking would send a new refund unconfirmed. So the list is
  // read again first, and only a refund still pending with this id is asked about.
  const listed = /** @type {Answer<PaymentList>} */ (
    await admin("GET", `/admin/payments?outcome=refund_required&refunded=false&limit=${REFUNDS_LIMIT}`)
  );
  const now = listed.ok ? listed.json.payments.find((q) => q.eventId === p.eventId) : undefined;
  if (!listed.ok || now?.refund?.status !== "pending" || now.refund.id !== p.refund?.id) {
    button.disabled = false;
    if (!listed.ok) sayRefunds("error", `GET /admin/payments: ${errorText(listed)}`);
    else if (now?.refund?.status === "failed")
      sayRefunds("error", `Stripe's refund of ${amount} to ${p.userId} failed meanwhile: nothing was asked.`);
    else sayRefunds("ok", `The refund of ${amount} to ${p.userId} was settled meanwhile: nothing was asked.`);
    refundsKey = "";
    await refreshRefunds();
    return;
  }
  const answer = /** @type {Answer<Payment>} */ (
    await admin("POST", `/admin/payments/${encodeURIComponent(p.eventId)}/refund`)
  );
  button.disabled = false;
  if (answer.ok) {
    await afterRefund(true, answer.json, `${amount} to ${p.userId}`, button);
    return;
  }
  const state = /** @type {{ state?: string } | undefined} */ (apiError(answer)?.details)?.state;
  if (state === "pending") sayRefunds("ok", `Stripe still has the refund of ${amount} to ${p.userId} pending.`);
  else sayRefunds("error", `The gateway refused: ${errorText(answer)}`);
  button.focus();
}

/**
 * `POST /admin/payments/:eventId/refunded`, confirmed first: paid back outside Flashgate.
 * @param {Payment} p
 * @param {string} amount
 * @param {HTMLButtonElement} button
 */
async function markRefunded(p, amount, button) {
  /** @type {Payment | null} */
  let done = null;
  const confirmed = await confirmChange({
    title: `Mark ${amount} to ${p.userId} as refunded?`,
    lines: [
      `Records that the payment of event ${p.eventId} was paid back outside Flashgate (nothing is sent to Stripe).`,
      "It leaves this list.",
    ],
    action: "Mark refunded",
    send: async () => {
      const answer = /** @type {Answer<Payment>} */ (
        await admin("POST", `/admin/payments/${encodeURIComponent(p.eventId)}/refunded`, {})
      );
      if (!answer.ok) return errorText(answer);
      done = answer.json;
      return null;
    },
  });
  await afterRefund(confirmed, done, `${amount} to ${p.userId}`, button);
}

/**
 * @param {boolean} confirmed
 * @param {Payment | null} payment the gateway's answer
 * @param {string} what
 * @param {HTMLButtonElement} button
 */
async function afterRefund(confirmed, payment, what, button) {
  if (!confirmed || !payment) {
    button.focus();
    return;
  }
  const refund = payment.refund;
  if (refund?.status === "pending") sayRefunds("ok", `Refund of ${what} sent to Stripe: pending there.`);
  else if (refund?.status === "failed") sayRefunds("error", `Stripe's refund of ${what} failed.`);
  else if (refund?.via === "stripe")
    sayRefunds("ok", `Refunded ${what} via Stripe${refund.id ? ` (${refund.id})` : ""}.`);
  else sayRefunds("ok", `Marked ${what} as refunded.`);
  refundsKey = "";
  await refreshRefunds();
  $("refunds-title").focus();
}

// Archived SKUs -------------------------------------------------------------------------------------

let archivedKey = "";

async function refreshArchived() {
  const answer = /** @type {Answer<AdminSkuList>} */ (await admin("GET", "/admin/skus?archived=true"));
  if (!answer.ok) return;
  const archived = answer.json.skus.filter((view) => view.status === "archived");
  const key = JSON.stringify(archived.map((v) => [v.sku, v.name, v.orders, v.revenue]));
  if (key === archivedKey) return;
  archivedKey = key;
  $("archived").hidden = archived.length === 0;
  $("archived-count").textContent = `(${archived.length})`;
  $("archived-list").replaceChildren(
    ...archived.map((view) => {
      const li = element("li", "hold");
      li.dataset.sku = view.sku;
      const name = element("p", "", `${view.name} `);
      name.append(element("code", "wrap", view.sku));
      li.append(name, element("p", "muted small", `${plural(view.orders.paid, "paid order")} · ${revenueText(view)}`));
      return li;
    }),
  );
}

/** The console's slower panels, asked with the webhooks' (every 10 s, and after an action). */
async function refreshConsole() {
  await Promise.all([refreshRefunds(), refreshArchived()]);
}

function forgetConsole() {
  views.clear();
  if ($("mint-dialog").open) $("mint-dialog").close();
  refundsKey = "";
  archivedKey = "";
  $("refund-list").replaceChildren();
  $("refund-message").textContent = "";
  $("archived-list").replaceChildren();
  $("lookup-results").replaceChildren();
  $("console-message").textContent = "";
}

// Find an order ---------------------------------------------------------------------------------

/**
 * Whether a value cannot be one segment of a path: the URL standard resolves "." and ".." away,
 * encoded or not (see unsendable in dashboard.js).
 * @param {string} value
 */
function dotSegment(value) {
  return value === "." || value === "..";
}

/**
 * An order by its reservation id and a user's orders, asked at once: the text may be either.
 * @param {string} query
 */
async function lookup(query) {
  const status = $("lookup-status");
  const results = $("lookup-results");
  results.replaceChildren();
  if (!query) {
    status.dataset.kind = "error";
    status.textContent = "Type a reservation id or a user id.";
    return;
  }
  // "." and ".." cannot be a segment of the URL (the browser resolves them: /admin/users/../orders
  // would be the order feed, every shopper's orders), so they are not asked for at all.
  if (dotSegment(query)) {
    status.dataset.kind = "error";
    status.textContent = `"${query}" cannot be looked up: a URL cannot carry it as an id (the browser would ask another route). Find its orders in the order feed, GET /admin/orders.`;
    return;
  }
  status.dataset.kind = "";
  status.textContent = `Looking for ${query}…`;
  const id = encodeURIComponent(query);
  const [byId, byUser] = await Promise.all([
    /** @type {Promise<Answer<Order>>} */ (admin("GET", `/admin/orders/${id}`)),
    /** @type {Promise<Answer<OrderList>>} */ (admin("GET", `/admin/users/${id}/orders`)),
  ]);
  const failed = [byId, byUser].find((answer) => !answer.ok && answer.status !== 404);
  if (failed) {
    status.dataset.kind = "error";
    status.textContent = `Looking for ${query}: ${errorText(failed)}`;
    return;
  }
  const found = new Map();
  if (byId.ok) found.set(byId.json.reservationId, byId.json);
  // A 404 here (not in the contract, but a proxy may answer it) lists no order rather than throwing.
  if (byUser.ok) for (const order of byUser.json.orders) found.set(order.reservationId, order);
  const orders = [...found.values()].sort((a, b) => Date.parse(b.createdAt) - Date.parse(a.createdAt));
  status.dataset.kind = orders.length > 0 ? "ok" : "";
  status.textContent =
    orders.length === 0
      ? `No order of ${query} in D1 (a hold made a second ago may not be there yet).`
      : `${plural(orders.length, "order")} of ${query} in D1.`;
  results.replaceChildren(
    ...orders.map((order) => {
      const li = element("li", "hold");
      li.dataset.id = order.reservationId;
      li.dataset.status = order.status;
      const what = element("p");
      const badge = element("span", "badge", order.status.replace("_", " "));
      badge.dataset.status = order.status;
      const amount = order.amount === null ? "no price" : money(order.amount, order.currency);
      what.append(badge, element("span", "", ` ${order.quantity} × ${order.sku} · ${amount} · user ${order.userId}`));
      const when = element(
        "p",
        "muted small",
        `made ${new Date(order.createdAt).toLocaleString()} · last change ${new Date(order.updatedAt).toLocaleString()}`,
      );
      const id = element("code", "rid", order.reservationId);
      li.append(what, when, id);
      return li;
    }),
  );
}

// Wiring ------------------------------------------------------------------------------------------

$("new-sku").addEventListener("click", () => openSkuForm(null));
$("f-variants-add").addEventListener("click", () => {
  const row = addSizeRow();
  sizesChanged();
  sizeInput(row, "id").focus();
});
$("f-access-add").addEventListener("click", () => {
  const row = addTierRow();
  tiersChanged();
  tierInput(row, "name").focus();
});
$("mint-form").addEventListener("submit", mintCodes);
$("mint-cancel").addEventListener("click", () => $("mint-dialog").close());
$("mint-close").addEventListener("click", () => $("mint-dialog").close());
$("mint-download").addEventListener("click", downloadCodes);
$("mint-copy").addEventListener("click", copyCodes);
// However it closes (Close, Escape), the codes leave the page, and the focus goes back to the card's button.
$("mint-dialog").addEventListener("close", () => {
  forgetCodes();
  const button = minting?.button;
  minting = null;
  if (button?.isConnected) button.focus();
});
$("sku-form").addEventListener("submit", saveSku);
$("sku-cancel").addEventListener("click", () => $("sku-dialog").close());
$("f-price").addEventListener("input", updatePriceHint);
$("f-currency").addEventListener("input", updatePriceHint);
$("lookup-form").addEventListener("submit", (event) => {
  event.preventDefault();
  lookup($("lookup-q").value.trim());
});

// What dashboard.js calls: a card's buttons on each render, the slower panels, and sign-out.
page.dashboardConsole = { renderSkuActions, refreshConsole, forgetConsole };
