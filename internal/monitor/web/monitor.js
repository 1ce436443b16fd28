// The stickyd monitor page. It polls api/view (the monitor.View JSON) every
// second and updates two views in place, never reloading the page: the
// processes (a card per worker, with its saturation bars and a memory chart
// projected to its limit, then governance's recent decisions) and the
// people (a table of one page of people at a time, by name: next and
// previous, filters by worker, group and state asked of the server, the
// page shown sortable by any column; the counts of everyone come from the
// view's tally, so a pool of a million people is never sent whole). The
// tab, the people's page, filters and sort, and the scroll position survive
// every update; the tab, page, filters and sort also survive a reload
// (address fragment and sessionStorage).
//
// No library, no build step: this file is served as written.
"use strict";

(() => {
  const POLL_MS = 1000;     // time between the end of a reading and the next
  const TIMEOUT_MS = 5000;  // a reading that takes longer has failed
  const HOT = 0.85;         // a saturation over this is drawn red
  const STALE_PROBE_MS = 10000;
  const MAX_EVENTS = 100;   // the events table shows the newest this many
  const RESOURCES = ["cpu", "memory", "goroutines", "mailbox"];
  const DECISIONS = new Set(["move", "start", "replace", "drain", "retire"]);
  const NUMERIC = new Set(["conns", "seen", "pages", "busy_seconds", "frames", "state_bytes", "gateway_micros"]);
  const SVGNS = "http://www.w3.org/2000/svg";
  const STORE = "stickyd.monitor.people";
  const PAGE = 100;         // people per page: the server's default

  const $ = (id) => document.getElementById(id);

  const ui = {
    view: null,        // the last View read
    okAt: null,        // when it was read (browser clock)
    polls: 0,          // readings taken
    failures: 0,       // failed readings in a row
    tab: "processes",
    sort: { key: "user", dir: 1 },
    query: { worker: "", group: "", state: "" }, // the people asked for
    cursor: "",        // the page shown: "" for the first, else a "next" cursor
    back: [],          // the cursors of the pages before it, oldest first
    seq: 0,            // bumped when the page asked for changes
    cards: new Map(),  // worker id → card
    rows: new Map(),   // user → people row
    cpu: new Map(),    // worker id → {probe, cpu, rate}: CPU use between probes
    eventsKey: "",     // what the events table shows, to redraw only on change
  };

  // ---------- formatting ----------

  const pad = (n) => String(n).padStart(2, "0");

  // when turns a JSON time into a Date, or null for absent and zero times.
  function when(s) {
    if (!s) return null;
    const d = new Date(s);
    return isNaN(d) || d.getUTCFullYear() < 1971 ? null : d;
  }

  function fmtTime(d) {
    if (!d) return "–";
    const t = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
    const now = new Date();
    if (d.toDateString() === now.toDateString()) return t;
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${t}`;
  }

  function fmtDuration(ms) {
    let s = Math.round(Math.abs(ms) / 1000);
    if (s < 60) return `${s}s`;
    let m = Math.floor(s / 60); s %= 60;
    if (m < 60) return s ? `${m}m ${s}s` : `${m}m`;
    let h = Math.floor(m / 60); m %= 60;
    if (h < 48) return m ? `${h}h ${m}m` : `${h}h`;
    const d = Math.floor(h / 24); h %= 24;
    return h ? `${d}d ${h}h` : `${d}d`;
  }

  function fmtAgo(d, now) {
    if (!d) return "–";
    const ms = now - d;
    if (ms < 1000 && ms > -1000) return "now";
    return ms >= 0 ? `${fmtDuration(ms)} ago` : `in ${fmtDuration(ms)}`;
  }

  function fmtBytes(n) {
    if (n === undefined || n === null) return "–";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return i === 0 ? `${n} B` : `${n.toFixed(n < 10 ? 1 : 0)} ${units[i]}`;
  }

  const intFormat = new Intl.NumberFormat();
  const fmtInt = (n) => (n === undefined || n === null ? "–" : intFormat.format(n));

  // fmtDollars writes micro-dollars as dollars: cents above a dollar,
  // four places below (a call costs fractions of a cent).
  function fmtDollars(micros) {
    const d = (micros || 0) / 1e6;
    return "$" + (d >= 1 ? d.toFixed(2) : d.toFixed(4));
  }

  function fmtSeconds(s) {
    if (s === undefined || s === null) return "–";
    if (s < 10) return `${s.toFixed(2)} s`;
    if (s < 120) return `${s.toFixed(1)} s`;
    return fmtDuration(s * 1000);
  }

  const fmtPct = (f) => `${Math.round(f * 100)}%`;

  // ---------- DOM helpers ----------

  function el(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined) e.append(kid);
    return e;
  }

  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // setText changes a node's text only when it differs, so a selection in
  // an unchanged cell survives the update.
  function setText(node, text) {
    text = String(text);
    if (node.textContent !== text) node.textContent = text;
  }

  // place keeps parent's children in the order of nodes, moving only those
  // out of place, and removes the children not in nodes.
  function place(parent, nodes) {
    const keep = new Set(nodes);
    for (const c of Array.from(parent.children)) if (!keep.has(c)) c.remove();
    nodes.forEach((n, i) => {
      if (parent.children[i] !== n) parent.insertBefore(n, parent.children[i] || null);
    });
  }

  // ---------- tabs ----------

  function showTab(name, push) {
    if (name !== "processes" && name !== "people") name = "processes";
    ui.tab = name;
    for (const b of document.querySelectorAll(".tabs [role=tab]")) {
      const on = b.dataset.view === name;
      b.setAttribute("aria-selected", on ? "true" : "false");
      b.tabIndex = on ? 0 : -1;
    }
    $("processes").hidden = name !== "processes";
    $("people").hidden = name !== "people";
    document.body.dataset.tab = name;
    if (push && location.hash !== "#" + name) history.replaceState(null, "", "#" + name);
  }

  // ---------- reading ----------

  class PollError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  // viewURL is api/view with the page of people the page shows.
  function viewURL() {
    const q = new URLSearchParams();
    for (const k of ["worker", "group", "state"]) if (ui.query[k]) q.set(k, ui.query[k]);
    if (ui.cursor) q.set("cursor", ui.cursor);
    const s = q.toString();
    return s ? `api/view?${s}` : "api/view";
  }

  async function read() {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), TIMEOUT_MS);
    try {
      const res = await fetch(viewURL(), {
        cache: "no-store", credentials: "same-origin", signal: ctl.signal,
        headers: { Accept: "application/json" },
      });
      if (!res.ok) {
        let msg = res.statusText;
        try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
        throw new PollError(res.status, msg);
      }
      return await res.json();
    } catch (e) {
      if (e.name === "AbortError") throw new PollError(0, `no answer within ${TIMEOUT_MS / 1000} s`);
      throw e;
    } finally {
      clearTimeout(timer);
    }
  }

  // poll reads the view once a second; refresh reads it now, for a new page
  // or filter. A reading asked for an older page is dropped.
  async function poll() {
    await readOnce();
    document.body.dataset.polls = String(ui.polls);
    setTimeout(poll, POLL_MS);
  }

  function refresh() {
    ui.seq++;
    savePeopleState();
    readOnce();
  }

  async function readOnce() {
    const seq = ui.seq;
    try {
      const v = await read();
      if (seq !== ui.seq) return;
      ui.view = v;
      ui.okAt = new Date();
      ui.polls++;
      ui.failures = 0;
      render(v);
      clearError();
    } catch (e) {
      if (seq !== ui.seq) return;
      if (e instanceof PollError && e.status === 400 && (ui.cursor || ui.back.length)) {
        // A page the server no longer takes (a cursor from another
        // version): start again from the first.
        ui.cursor = "";
        ui.back = [];
        refresh();
        return;
      }
      ui.failures++;
      showError(e);
    }
  }

  function showError(e) {
    const box = $("error");
    box.replaceChildren();
    if (e instanceof PollError && e.status === 401) {
      box.append("Your monitor session has ended (HTTP 401). ",
        el("a", { href: "./", text: "Log in again" }), ".");
    } else {
      const what = e instanceof PollError
        ? (e.status ? `HTTP ${e.status}: ${e.message}` : e.message)
        : (e && e.message) || String(e);
      box.append(`Cannot read the monitor (${what}). `);
      box.append(ui.okAt
        ? `Showing the reading of ${fmtTime(ui.okAt)} (${fmtAgo(ui.okAt, new Date())}); `
        : "Nothing read yet; ");
      box.append(`retrying every second (${ui.failures} ${ui.failures === 1 ? "failure" : "failures in a row"}).`);
    }
    box.hidden = false;
    document.body.classList.add("stale");
    $("live-dot").className = "dot down";
    $("live-dot").title = "the last reading failed";
  }

  function clearError() {
    $("error").hidden = true;
    $("error").replaceChildren();
    document.body.classList.remove("stale");
    $("live-dot").className = "dot up";
    $("live-dot").title = "polling every second";
  }

  // ---------- rendering ----------

  function render(v) {
    const at = when(v.at) || new Date();
    const workers = v.workers || [];
    const people = v.people || [];
    const tally = v.tally || {};
    const t = $("last-reading");
    setText(t, fmtTime(at));
    t.dateTime = at.toISOString();
    document.body.dataset.at = at.toISOString();

    const byState = {};
    for (const w of workers) byState[w.state] = (byState[w.state] || 0) + 1;
    const states = Object.entries(byState).sort().map(([s, n]) => `${n} ${s}`).join(", ");
    const parts = [`${workers.length} ${workers.length === 1 ? "worker" : "workers"}${states ? ` (${states})` : ""}`,
      `${fmtInt(tally.users || 0)} ${tally.users === 1 ? "person" : "people"}`];
    if (v.agent) parts.push(`agent ${v.agent}`);
    if (v.leader) parts.push(`leader ${v.leader}`);
    if (v.default_group) parts.push(`default group ${v.default_group}`);
    setText($("summary"), parts.join(" · "));

    const un = v.unreachable_agents || [];
    $("unreachable").hidden = un.length === 0;
    setText($("unreachable"), un.length
      ? `Not answering: ${un.join(", ")}. Their workers show their last known numbers.` : "");

    const windows = v.maintenance || [];
    $("maintenance").hidden = windows.length === 0;
    setText($("maintenance"), windows.map(w =>
      `${w.backend} in maintenance since ${fmtAgo(new Date(w.since), at)}` +
      (w.reason ? ` (${w.reason})` : "") +
      `: ${w.waiting} request${w.waiting === 1 ? "" : "s"} waiting, ${w.timed_out} timed out (max wait ${w.max_wait})`).join(" · "));
    const events = v.events || [];
    const pending = pendingDecisions(events);
    renderWorkers(workers, events, pending, at);
    renderEvents(events, pending);
    renderFilters(v);
    renderPeople(people);
    renderTenants(v.tenants || []);
  }

  // ---------- the gateway's tenants ----------

  // fmtDollars words micro-dollars as dollars, to the cent below a
  // thousand and to the micro-dollar below a cent.
  function fmtDollars(micros) {
    const d = micros / 1e6;
    if (d !== 0 && Math.abs(d) < 0.01) return `$${d.toFixed(6)}`;
    return `$${d.toFixed(2)}`;
  }

  function renderTenants(tenants) {
    $("tenants-box").hidden = tenants.length === 0;
    const rows = tenants.map(t => {
      const tr = document.createElement("tr");
      const budget = t.budget_micros
        ? `${fmtDollars(t.budget_micros)} ${t.period === "day" ? "a day" : t.period === "month" ? "a month" : "in all"}` : "none";
      for (const [text, num] of [[t.tenant, false], [fmtDollars(t.today_micros || 0), true], [fmtDollars(t.month_micros || 0), true],
        [fmtDollars(t.micros || 0), true], [fmtInt(t.calls || 0), true], [budget, true]]) {
        const td = document.createElement("td");
        if (num) td.className = "num";
        setText(td, text);
        tr.appendChild(td);
      }
      return tr;
    });
    $("tenants").tBodies[0].replaceChildren(...rows);
  }

  // ---------- processes ----------

  // field reads an event's field: governor.Event has no JSON tags, so its
  // keys are Go's ("At", "ID"); lower-case keys are read too.
  function field(e, k) {
    for (const key of [k, k.charAt(0).toUpperCase() + k.slice(1), k.toUpperCase()]) {
      if (e[key] !== undefined) return e[key];
    }
    return undefined;
  }

  // pendingDecisions returns the IDs of the decisions not yet reported
  // completed or failed: what governance is doing now.
  function pendingDecisions(events) {
    const open = new Set();
    for (const e of events) {
      const id = field(e, "id"), kind = field(e, "kind");
      if (!id) continue;
      if (DECISIONS.has(kind)) open.add(id);
      else if (kind === "completed" || kind === "failed") open.delete(id);
    }
    return open;
  }

  function renderWorkers(workers, events, pending, now) {
    const box = $("workers");
    const nodes = [];
    const seen = new Set();
    for (const w of workers) {
      seen.add(w.id);
      let card = ui.cards.get(w.id);
      if (!card) {
        card = makeCard(w.id);
        ui.cards.set(w.id, card);
      }
      fillCard(card, w, events, pending, now);
      nodes.push(card.el);
    }
    for (const id of Array.from(ui.cards.keys())) {
      if (!seen.has(id)) { ui.cards.delete(id); ui.cpu.delete(id); }
    }
    place(box, nodes);
    $("no-workers").hidden = workers.length > 0;
  }

  const FACTS = [["pid", "pid"], ["incarnation", "incarnation"], ["born", "born"], ["died", "died"],
    ["probe", "last probe"], ["failures", "missed probes"], ["version", "app version"], ["template", "template"]];
  const NUMBERS = [["users", "users"], ["conns", "conns"], ["pages", "pages"],
    ["heap", "heap"], ["rss", "RSS"], ["goroutines", "goroutines"],
    ["cpu", "CPU now"], ["cputime", "CPU time"], ["mailbox", "mailbox"], ["frames", "frames"]];

  function makeCard(id) {
    const c = { f: {}, n: {} };
    // A number's label and value stay together (a div per pair, which a
    // dl may hold) and the pairs wrap: a value is never cut, at any width.
    const dl = (list, into, cls, paired) => {
      const d = el("dl", { class: cls });
      for (const [k, label] of list) {
        const dd = el("dd", { "data-field": k });
        into[k] = { dt: el("dt", { text: label }), dd };
        if (paired) d.append(el("div", { class: "pair" }, into[k].dt, into[k].dd));
        else d.append(into[k].dt, into[k].dd);
      }
      return d;
    };
    c.state = el("span", { class: "state" });
    c.cordoned = el("span", { class: "badge cordoned", text: "cordoned", hidden: "" });
    c.sub = el("p", { class: "sub" });
    c.hints = el("ul", { class: "hints" });
    c.bars = el("div", { class: "bars" });
    c.chart = el("div", { class: "chart" });
    c.decision = el("p", { class: "decision" });
    c.el = el("article", { class: "card", "data-worker": id, id: "worker-" + id },
      el("header", {}, el("h3", { class: "wid", text: id }), c.state, c.cordoned),
      c.sub, c.hints, dl(NUMBERS, c.n, "nums", true), c.bars, c.chart, dl(FACTS, c.f, "facts"), c.decision);
    return c;
  }

  function fillCard(c, w, events, pending, now) {
    const stateClass = `state-${w.state || "unknown"}`;
    if (c.stateClass !== stateClass) {
      if (c.stateClass) c.el.classList.remove(c.stateClass);
      c.el.classList.add(stateClass);
      c.stateClass = stateClass;
    }
    c.el.dataset.state = w.state || "";
    setText(c.state, w.state || "?");
    c.state.className = `state state-${w.state || "unknown"}`;
    c.cordoned.hidden = !w.cordoned;
    setText(c.sub, [w.group && `group ${w.group}`, w.runtime && w.runtime, w.agent && `agent ${w.agent}`].filter(Boolean).join(" · "));

    const born = when(w.born), died = when(w.died_at), probe = when(w.last_probe);
    const fact = (k, text) => {
      setText(c.f[k].dd, text);
      c.f[k].dt.hidden = c.f[k].dd.hidden = text === "";
    };
    fact("pid", w.pid ? String(w.pid) : "–");
    fact("incarnation", String(w.incarnation ?? "–"));
    fact("born", born ? `${fmtTime(born)} · ${fmtAgo(born, now)}` : "–");
    fact("died", died || w.how_died ? `${fmtTime(died)}${w.how_died ? " · " + w.how_died : ""}` : "");
    fact("probe", probe ? fmtAgo(probe, now) : "never");
    c.f.probe.dd.classList.toggle("late", !!probe && now - probe > STALE_PROBE_MS);
    fact("failures", w.probe_failures ? fmtInt(w.probe_failures) : "");
    c.f.failures.dd.classList.toggle("late", !!w.probe_failures);
    fact("version", w.app_version || "");
    // A worker forked from its group's template: the template's pid, and
    // how many times it was built (more than once: it died and was rebuilt).
    fact("template", w.template ? `pid ${w.template.pid || "–"} · built ${fmtInt(w.template.builds)}×` : "");

    const num = (k, text) => setText(c.n[k].dd, text);
    num("users", fmtInt(w.users));
    num("conns", fmtInt(w.conns));
    num("pages", fmtInt(w.pages));
    const rate = cpuRate(w);
    const process = { heap: fmtBytes(w.heap_bytes), rss: fmtBytes(w.rss_bytes),
      cpu: rate === null ? "–" : fmtPct(rate), cputime: fmtSeconds(w.cpu_seconds) };
    for (const k of Object.keys(process)) {
      // An in-process worker's probe reads the agent's whole process: its
      // figures are not the worker's own, so they say "shared" and the
      // process's figure is in the tooltip (and in the card's hint).
      num(k, w.shared_process ? "shared" : process[k]);
      c.n[k].dd.classList.toggle("shared", !!w.shared_process);
      c.n[k].dd.title = w.shared_process ? `the agent's process: ${process[k]}, shared with the agent and every in-process worker` : "";
    }
    num("goroutines", fmtInt(w.goroutines));
    num("mailbox", fmtInt(w.mailbox_depth));
    num("frames", fmtInt(w.frames));

    renderBars(c.bars, w.saturation || {});
    renderChart(c.chart, w, now);
    renderHints(c.hints, w, died, probe, now);

    // The latest decision that touches this worker.
    let last = null;
    for (const e of events) if (field(e, "worker") === w.id || field(e, "to") === w.id) last = e;
    c.decision.hidden = !last;
    if (last) {
      const on = pending.has(field(last, "id"));
      c.decision.classList.toggle("pending", on);
      setText(c.decision, `${on ? "in progress: " : ""}${field(last, "kind")} · ${fmtAgo(when(field(last, "at")), now)} · ${field(last, "reason") || ""}`);
      c.decision.title = field(last, "reason") || "";
    }
  }

  // cpuRate is the worker's CPU use in cores between its last two probes
  // this page saw, or null before it saw two.
  function cpuRate(w) {
    const probe = w.last_probe || "";
    const prev = ui.cpu.get(w.id);
    let rate = prev ? prev.rate : null;
    if (prev && probe && prev.probe !== probe) {
      const dt = (new Date(probe) - new Date(prev.probe)) / 1000;
      if (dt > 0 && w.cpu_seconds >= prev.cpu) rate = (w.cpu_seconds - prev.cpu) / dt;
    }
    if (!prev || prev.probe !== probe) ui.cpu.set(w.id, { probe, cpu: w.cpu_seconds, rate });
    return rate;
  }

  function renderHints(ul, w, died, probe, now) {
    const hints = [];
    const sat = w.saturation || {};
    if (w.state === "dead") hints.push(["bad", `dead${died ? " since " + fmtTime(died) : ""}${w.how_died ? ": " + w.how_died : ""}`]);
    if (w.state === "unreachable") {
      hints.push(["warn", `unreachable: no fresh answer${probe ? " since " + fmtAgo(probe, now) : ""}; numbers are the last known`]);
    }
    if (w.cordoned) hints.push(["warn", "cordoned: takes no newcomers while it is drained or replaced"]);
    if (w.shared_process) {
      hints.push(["info", `in-process: heap, RSS, CPU and the memory chart are the agent's process's (heap ${fmtBytes(w.heap_bytes)}, ` +
        `RSS ${fmtBytes(w.rss_bytes)}), shared with every in-process worker`]);
    }
    for (const r of Object.keys(sat).sort()) {
      if (sat[r] > HOT) hints.push(["bad", `${r} at ${fmtPct(sat[r])} of its limit: governance moves people off`]);
    }
    const proj = when(w.projection);
    if (proj) hints.push(["warn", `memory reaches its limit ${fmtAgo(proj, now)} (${fmtTime(proj)}): due for replacement`]);
    const text = hints.map((h) => h.join("|")).join("\n");
    if (ul.dataset.text === text) return;
    ul.dataset.text = text;
    ul.replaceChildren(...hints.map(([cls, t]) => el("li", { class: cls, text: t })));
  }

  function renderBars(box, sat) {
    const names = Object.keys(sat).sort((a, b) => {
      const ia = RESOURCES.indexOf(a), ib = RESOURCES.indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
    });
    const bars = names.map((name) => {
      let bar = box.querySelector(`.bar[data-resource="${CSS.escape(name)}"]`);
      if (!bar) {
        bar = el("div", { class: "bar", "data-resource": name },
          el("span", { class: "label", text: name }),
          el("span", { class: "track" }, el("span", { class: "fill" })),
          el("span", { class: "pct" }));
      }
      const f = Number(sat[name]) || 0;
      const hot = f > HOT;
      bar.classList.toggle("hot", hot);
      bar.dataset.hot = hot ? "true" : "false";
      bar.dataset.value = String(f);
      bar.querySelector(".fill").style.width = `${Math.min(Math.max(f, 0), 1) * 100}%`;
      setText(bar.querySelector(".pct"), fmtPct(f));
      bar.title = `${name}: ${fmtPct(f)} of its limit${hot ? ` (over ${fmtPct(HOT)})` : ""}`;
      return bar;
    });
    place(box, bars);
    box.hidden = bars.length === 0;
  }

  // memoryLimit is the worker's memory ceiling in bytes, or null: the
  // view's memory_limit when it has one, else what the memory saturation
  // implies (governance measures the heap, as the chart's samples do).
  function memoryLimit(w) {
    if (w.memory_limit > 0) return w.memory_limit;
    const f = w.saturation && w.saturation.memory;
    return f > 0 && w.heap_bytes > 0 ? w.heap_bytes / f : null;
  }

  // renderChart draws the worker's memory over time, the limit, and the
  // replacement projection from the last sample to the limit.
  function renderChart(box, w, now) {
    const samples = (w.memory || []).map((s) => ({ t: +new Date(s.at), v: Number(s.value) || 0 }))
      .filter((s) => !isNaN(s.t));
    const limit = memoryLimit(w);
    const proj = when(w.projection);
    const key = JSON.stringify([w.memory, limit, w.projection]);
    if (box.dataset.key === key) return;
    box.dataset.key = key;
    box.dataset.samples = String(samples.length);
    box.dataset.projection = proj ? "true" : "false";

    const W = 320, H = 120, L = 46, R = 10, T = 10, B = 18;
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", class: "mem" });
    const title = svg("title", {}, `memory of ${w.id}` + (limit ? `, limit ${fmtBytes(Math.round(limit))}` : "") +
      (proj ? `, projected to reach it at ${fmtTime(proj)}` : ""));
    root.append(title);
    if (samples.length === 0) {
      box.replaceChildren(el("p", { class: "none", text: "no memory history yet" }));
      return;
    }
    // The time axis ends at the newest sample (or at the projection, up to
    // three times the history's span further) and covers at least a minute.
    const t1 = samples[samples.length - 1].t;
    const t0 = Math.min(samples[0].t, t1 - 60000);
    const span = t1 - t0;
    let tEnd = t1;
    if (proj && +proj > t1) tEnd = Math.min(+proj, t1 + 3 * span);
    let top = Math.max(...samples.map((s) => s.v), limit || 0, 1 << 20) * 1.08;
    const x = (t) => L + ((t - t0) / (tEnd - t0)) * (W - L - R);
    const y = (v) => T + (1 - v / top) * (H - T - B);

    // Axes and labels.
    root.append(svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }));
    root.append(svg("text", { x: L - 4, y: y(0), "text-anchor": "end", class: "tick" }, "0"));
    const peak = Math.max(...samples.map((s) => s.v));
    if (y(0) - y(peak) > 12) {
      root.append(svg("text", { x: L - 4, y: y(peak) + 3, "text-anchor": "end", class: "tick" }, fmtBytes(Math.round(peak))));
      root.append(svg("line", { x1: L - 2, y1: y(peak), x2: L, y2: y(peak), class: "axis" }));
    } else {
      root.append(svg("text", { x: L + 3, y: y(peak) - 4, class: "tick" }, fmtBytes(Math.round(peak))));
    }
    root.append(svg("text", { x: L, y: H - 4, class: "tick" }, fmtTime(new Date(t0))));
    root.append(svg("text", { x: W - R, y: H - 4, "text-anchor": "end", class: "tick" }, fmtTime(new Date(tEnd))));

    // The limit.
    if (limit) {
      root.append(svg("line", { x1: L, y1: y(limit), x2: W - R, y2: y(limit), class: "limit" }));
      root.append(svg("text", { x: L + 3, y: y(limit) - 3, class: "limit-label" }, `limit ${fmtBytes(Math.round(limit))}`));
    }

    // The samples: an area and its line.
    const pts = samples.map((s) => `${x(s.t).toFixed(1)},${y(s.v).toFixed(1)}`);
    const first = samples[0].t;
    root.append(svg("path", { d: `M${x(first).toFixed(1)},${y(0)} L${pts.join(" L")} L${x(t1).toFixed(1)},${y(0)} Z`, class: "area" }));
    root.append(svg("polyline", { points: pts.join(" "), class: "line" }));

    // The projection: from the last sample to the limit at its time,
    // clipped at the chart's right edge when it lies beyond.
    if (proj && limit && +proj > t1) {
      const last = samples[samples.length - 1];
      let pt = +proj, pv = limit;
      if (pt > tEnd) {
        pv = last.v + ((limit - last.v) * (tEnd - last.t)) / (pt - last.t);
        pt = tEnd;
      }
      root.append(svg("line", { x1: x(last.t), y1: y(last.v), x2: x(pt), y2: y(pv), class: "projection" }));
      if (pt === +proj) root.append(svg("circle", { cx: x(pt), cy: y(pv), r: 3, class: "projection-end" }));
      const label = `limit ${fmtAgo(proj, now)}`;
      root.append(svg("text", { x: Math.min(x(pt), W - R), y: Math.max(y(pv) - 5, 9), "text-anchor": "end", class: "projection-label" }, label));
    }
    box.replaceChildren(root);
  }

  function renderEvents(events, pending) {
    const shown = events.slice(-MAX_EVENTS).reverse();
    const key = JSON.stringify([shown.map((e) => [field(e, "at"), field(e, "id"), field(e, "kind")]), [...pending]]);
    $("no-events").hidden = events.length > 0;
    if (key === ui.eventsKey) return;
    ui.eventsKey = key;
    const body = $("events").tBodies[0];
    body.replaceChildren(...shown.map((e) => {
      const kind = field(e, "kind") || "";
      const on = DECISIONS.has(kind) && pending.has(field(e, "id"));
      return el("tr", { class: on ? "pending" : "", "data-kind": kind },
        el("td", { class: "time", text: fmtTime(when(field(e, "at"))) }),
        el("td", {}, el("span", { class: `kind kind-${kind}`, text: kind }),
          on ? el("span", { class: "badge pending", text: "in progress" }) : null),
        el("td", { text: field(e, "group") || "" }),
        el("td", { text: field(e, "worker") || "" }),
        el("td", { text: field(e, "user") || "" }),
        el("td", { text: field(e, "to") || "" }),
        el("td", { class: "reason", text: field(e, "reason") || "" }));
    }));
  }

  // ---------- people ----------

  function loadPeopleState() {
    try {
      const s = JSON.parse(sessionStorage.getItem(STORE) || "{}");
      if (s.sort && typeof s.sort.key === "string") ui.sort = { key: s.sort.key, dir: s.sort.dir === -1 ? -1 : 1 };
      if (s.query && typeof s.query === "object") {
        for (const k of ["worker", "group", "state"]) if (typeof s.query[k] === "string") ui.query[k] = s.query[k];
      }
      if (typeof s.cursor === "string") ui.cursor = s.cursor;
      if (Array.isArray(s.back)) ui.back = s.back.filter((c) => typeof c === "string");
    } catch (_) { /* a broken entry: start fresh */ }
  }

  function savePeopleState() {
    try {
      sessionStorage.setItem(STORE, JSON.stringify({ sort: ui.sort, query: ui.query, cursor: ui.cursor, back: ui.back }));
    } catch (_) { /* storage full or disabled: state lives in memory */ }
  }

  function compare(a, b) {
    const k = ui.sort.key;
    let d;
    if (NUMERIC.has(k)) d = (Number(a[k]) || 0) - (Number(b[k]) || 0);
    else d = String(a[k] || "").localeCompare(String(b[k] || ""), undefined, { numeric: true });
    if (d === 0 && k !== "user") d = String(a.user).localeCompare(String(b.user), undefined, { numeric: true });
    return d * ui.sort.dir;
  }

  // renderFilters offers the workers and groups the reading knows (and
  // keeps the one chosen, even when it has gone).
  function renderFilters(v) {
    const workers = new Set((v.workers || []).map((w) => w.id));
    const groups = new Set((v.workers || []).map((w) => w.group).filter(Boolean));
    for (const g of Object.keys((v.tally || {}).groups || {})) groups.add(g);
    fillSelect($("f-worker"), workers, ui.query.worker);
    fillSelect($("f-group"), groups, ui.query.group);
    $("f-state").value = ui.query.state;
  }

  function fillSelect(sel, values, chosen) {
    const want = ["", ...Array.from(values).sort((a, b) => a.localeCompare(b, undefined, { numeric: true }))];
    if (chosen && !values.has(chosen)) want.push(chosen);
    const have = Array.from(sel.options).map((o) => o.value);
    if (have.join("\n") !== want.join("\n")) {
      sel.replaceChildren(...want.map((x) => el("option", { value: x, text: x || "any" })));
    }
    sel.value = chosen;
  }

  // matching is how many people the tally says the filters select, when it
  // can say (no filter, or one), else null.
  function matching(tally) {
    const set = ["worker", "group", "state"].filter((k) => ui.query[k]);
    if (set.length === 0) return tally.users || 0;
    if (set.length > 1) return null;
    const k = set[0];
    const by = { worker: tally.workers, group: tally.groups, state: tally.state }[k] || {};
    return by[ui.query[k]] || 0;
  }

  const CELLS = [
    ["user", (p) => p.user],
    ["worker", (p) => p.worker || "–"],
    ["group", (p) => p.group || "–"],
    ["state", (p) => p.state || "–"],
    ["conns", (p) => fmtInt(p.conns)],
    ["seen", (p) => (p.seen ? fmtAgo(new Date(p.seen * 1000), new Date()) : "–")],
    ["pages", (p) => fmtInt(p.pages)],
    ["busy_seconds", (p) => fmtSeconds(p.busy_seconds)],
    ["frames", (p) => fmtInt(p.frames)],
    ["state_bytes", (p) => fmtBytes(p.state_bytes)],
    ["gateway_micros", (p) => (p.gateway_calls ? fmtDollars(p.gateway_micros) : "–")],
  ];

  function renderPeople(people) {
    const shown = people.slice().sort(compare);
    const seen = new Set(people.map((p) => p.user));
    for (const u of Array.from(ui.rows.keys())) if (!seen.has(u)) ui.rows.delete(u);
    const rows = shown.map((p) => {
      let r = ui.rows.get(p.user);
      if (!r) {
        r = { tr: el("tr", { "data-user": p.user }), cells: {}, worker: null };
        for (const [k] of CELLS) {
          r.cells[k] = el("td", { "data-key": k, class: NUMERIC.has(k) ? "num" : "" });
          r.tr.append(r.cells[k]);
        }
        ui.rows.set(p.user, r);
      }
      for (const [k, f] of CELLS) setText(r.cells[k], f(p));
      r.cells.state.className = `pstate pstate-${p.state || "unknown"}`;
      r.tr.dataset.worker = p.worker || "";
      if (r.worker !== null && r.worker !== p.worker) {
        // A move: flash the row (the animation restarts on a new class).
        r.tr.classList.remove("moved");
        void r.tr.offsetWidth;
        r.tr.classList.add("moved");
        r.tr.title = `moved from ${r.worker} to ${p.worker} at ${fmtTime(new Date())}`;
      }
      r.worker = p.worker;
      return r.tr;
    });
    place($("people-table").tBodies[0], rows);
    $("no-people").hidden = shown.length > 0;
    const first = ui.back.length * PAGE + 1;
    const total = matching((ui.view && ui.view.tally) || {});
    setText($("people-count"), shown.length === 0 ? (total === null ? "nobody" : `nobody of ${fmtInt(total)}`)
      : `${fmtInt(first)}–${fmtInt(first + shown.length - 1)}${total === null ? "" : ` of ${fmtInt(total)}`}`);
    $("prev-page").disabled = ui.back.length === 0;
    $("next-page").disabled = !(ui.view && ui.view.next);
    for (const th of document.querySelectorAll("#people-table th[data-key]")) {
      if (th.dataset.key === ui.sort.key) th.setAttribute("aria-sort", ui.sort.dir > 0 ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
  }

  function sortBy(key) {
    ui.sort = ui.sort.key === key ? { key, dir: -ui.sort.dir } : { key, dir: NUMERIC.has(key) ? -1 : 1 };
    savePeopleState();
    if (ui.view) renderPeople(ui.view.people || []);
  }

  // ---------- start ----------

  function start() {
    loadPeopleState();
    for (const k of ["worker", "group", "state"]) {
      const sel = $(`f-${k}`);
      if (ui.query[k] && !Array.from(sel.options).some((o) => o.value === ui.query[k])) {
        sel.append(el("option", { value: ui.query[k], text: ui.query[k] }));
      }
      sel.value = ui.query[k];
      sel.addEventListener("change", () => {
        ui.query[k] = sel.value;
        ui.cursor = "";
        ui.back = [];
        refresh();
      });
    }
    $("next-page").addEventListener("click", () => {
      if (!ui.view || !ui.view.next) return;
      ui.back.push(ui.cursor);
      ui.cursor = ui.view.next;
      $("next-page").disabled = true;
      refresh();
    });
    $("prev-page").addEventListener("click", () => {
      if (ui.back.length === 0) return;
      ui.cursor = ui.back.pop();
      $("prev-page").disabled = ui.back.length === 0;
      refresh();
    });
    for (const th of document.querySelectorAll("#people-table th[data-key]")) {
      th.addEventListener("click", () => sortBy(th.dataset.key));
      th.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(th.dataset.key); }
      });
    }
    for (const b of document.querySelectorAll(".tabs [role=tab]")) {
      b.addEventListener("click", () => showTab(b.dataset.view, true));
    }
    // A worker named in the people table opens its card.
    $("people-table").addEventListener("click", (e) => {
      const td = e.target.closest("td[data-key=worker]");
      if (!td || !ui.cards.has(td.textContent)) return;
      showTab("processes", true);
      const card = ui.cards.get(td.textContent).el;
      card.scrollIntoView({ block: "center" });
      card.classList.remove("flash");
      void card.offsetWidth;
      card.classList.add("flash");
    });
    window.addEventListener("hashchange", () => showTab(location.hash.slice(1), false));
    showTab(location.hash.slice(1), false);
    poll();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
