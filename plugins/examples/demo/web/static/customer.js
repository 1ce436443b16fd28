// stickyd demo: a customer page, rendered from its page tree. The record's
// truth is in the global store; the worker puts it in page.tree and keeps it
// there when anyone, on any worker, saves it. This file draws page.tree,
// keeps what the person is typing, and sends ops:
//
//   {op: "show", id}                      the customer of this URL, each time the page goes live
//   {op: "save", id, name?, email?, notes?}  only the fields the person changed
//   {op: "ticket"}                        the next number of the shared sequence
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const wanted = document.body.dataset.customer;
  const FIELDS = ["name", "email", "notes"];
  const input = { name: $("c-name"), email: $("c-email"), notes: $("c-notes") };
  // base is each field's value as last taken from the tree: the field holds
  // an edit of the person's while its input differs from it.
  const base = { name: null, email: null, notes: null };
  let page = null, showing = false, opError = null;

  function dirty(f) { return base[f] !== null && input[f].value !== base[f]; }

  // send sends an op; again (up to 3 times) when the connection dropped while
  // it was in flight, if retry says the op is safe to repeat.
  async function send(data, errorBox, retry) {
    for (let attempt = 1; ; attempt++) {
      try {
        const answer = await page.send(data);
        showError(errorBox, answer && answer.warning ? new Error(answer.warning) : null);
        return answer;
      } catch (e) {
        if (retry && e.retry && attempt < 3) { await new Promise((r) => setTimeout(r, 300 * attempt)); continue; }
        showError(errorBox, e);
        throw e;
      } finally {
        renderStatus();
      }
    }
  }

  function showError(box, err) {
    if (box === $("c-error")) { opError = err; renderError(); return; }
    box.hidden = !err;
    box.textContent = err ? (err.message || String(err)) : "";
  }

  function renderError() {
    const t = (page && page.tree) || {};
    const text = opError ? (opError.message || String(opError)) : (t.id === wanted && t.error) || "";
    $("c-error").hidden = !text;
    $("c-error").textContent = text;
  }

  function showNotice(text) {
    $("notice-text").textContent = text;
    $("notice").hidden = false;
  }
  $("notice-close").addEventListener("click", () => { $("notice").hidden = true; });

  function renderStatus() {
    if (!page) return;
    const server = document.body.dataset.worker;
    const w = $("s-customer-worker"), st = $("s-customer-status");
    w.textContent = page.worker || "–";
    const moved = !!(page.worker && server && page.worker !== server);
    $("s-moved").hidden = !moved;
    w.classList.toggle("moved", moved);
    w.title = moved ? "not the worker that rendered this page: the person moved" : "";
    st.textContent = page.status;
    st.className = "st st-" + page.status;
  }

  // show asks the worker for this URL's customer, read afresh from the
  // store. It is sent each time the page goes live (a load, a reconnect, the
  // redirect after signing in: the worker subscribes the page again then),
  // and when the page, a tab's page resumed after navigating, shows another
  // customer.
  function show() {
    if (showing) return;
    showing = true;
    send({ op: "show", id: wanted }, $("c-error"), true)
      .catch(() => {})
      .finally(() => { showing = false; });
  }

  function ensureShown(t) {
    if (t.id && t.id !== wanted) show();
  }

  function onStatus(status) {
    renderStatus();
    if (status === "live" || status === "polling") show();
  }

  function flash(el) {
    el.classList.remove("live-update");
    void el.offsetWidth; // restart the animation
    el.classList.add("live-update");
  }

  function render(t) {
    ensureShown(t);
    if (t.id !== wanted) {
      $("c-heading").textContent = "loading…";
      renderError();
      return;
    }
    $("c-heading").textContent = t.name || "(no name)";
    for (const f of FIELDS) {
      const el = input[f], v = t[f] || "";
      if (el.value === v) {
        base[f] = v; // what the person typed is what is stored now
        el.classList.remove("conflict");
        el.title = "";
      } else if (!dirty(f)) {
        const first = base[f] === null;
        el.value = v;
        base[f] = v;
        if (!first) flash(el);
      } else if (v !== base[f]) {
        // Saved meanwhile by someone else: the person's edit stays, and
        // wins if they save it.
        el.classList.add("conflict");
        el.title = "saved meanwhile" + (t.updated_by ? " by " + t.updated_by : "") + ": " + v;
      }
    }
    $("c-version").textContent = t.version
      ? "version " + t.version + (t.updated_by ? ", saved by " + t.updated_by : "")
      : "not saved yet: these are the defaults";
    $("t-mine").textContent = t.ticket ? "#" + t.ticket : "none yet";
    $("t-last").textContent = t.last_ticket ? "#" + t.last_ticket : "none yet";
    $("s-live").textContent = "customer #" + t.id + " · version " + (t.version || 0);
    renderError();
    renderStatus();
  }

  $("c-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const t = page.tree || {};
    if (t.id !== wanted) return;
    const msg = { op: "save", id: wanted };
    for (const f of FIELDS) if (dirty(f)) msg[f] = input[f].value;
    if (Object.keys(msg).length === 2) {
      if (t.version) { $("c-version").textContent = "nothing changed: version " + t.version; return; }
      msg.name = input.name.value; // the first save stores the defaults
    }
    const button = $("c-save");
    button.disabled = true;
    // Saving sets fields, so a save sent twice stores the same record.
    send(msg, $("c-error"), true).then(() => {
      for (const f of FIELDS) {
        if (f in msg && input[f].value === msg[f]) base[f] = msg[f];
      }
      render(page.tree);
    }, () => {}).finally(() => { button.disabled = false; });
  });

  $("t-take").addEventListener("click", () => {
    const button = $("t-take");
    button.disabled = true;
    // Never resent: a ticket whose answer was lost was still taken.
    send({ op: "ticket" }, $("t-error"), false).then((a) => {
      $("t-mine").textContent = "#" + a.ticket;
    }, () => {}).finally(() => { button.disabled = false; });
  });

  page = stickyd.page({ kind: "customer", onChange: render, onNotice: showNotice, onStatus: onStatus });
  // page.worker changes on any answer, even one without deltas.
  setInterval(renderStatus, 1000);
  renderStatus();
})();
