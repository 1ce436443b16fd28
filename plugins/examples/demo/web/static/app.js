// stickyd demo: the orders grid and the document, rendered from their page
// trees. The worker holds the truth; this file only draws page.tree and sends
// ops. Every op is idempotent (filters, sorts, offsets and texts are set, not
// toggled or added), so one that failed on a dropped connection is sent again.
(function () {
  "use strict";

  const $ = (id) => document.getElementById(id);
  const LABELS = { id: "#", name: "Customer", city: "City", product: "Product", status: "Status", amount: "Amount", date: "Date" };
  const NUMERIC = { id: true, amount: true };
  const MIN_ROWS = 5, MAX_ROWS = 200;
  const num = new Intl.NumberFormat();
  const money = new Intl.NumberFormat(undefined, { minimumFractionDigits: 2, maximumFractionDigits: 2 });

  let grid = null, doc = null;

  // ---- shared helpers

  function debounce(fn, ms) {
    let t = 0;
    return function () { clearTimeout(t); t = setTimeout(fn, ms); };
  }

  // send sends an op, again (up to 3 times) when the connection dropped
  // while it was in flight.
  async function send(page, data, errorBox) {
    for (let attempt = 1; ; attempt++) {
      try {
        const answer = await page.send(data);
        showError(errorBox, null);
        return answer;
      } catch (e) {
        if (e.retry && attempt < 3) { await new Promise((r) => setTimeout(r, 300 * attempt)); continue; }
        showError(errorBox, e);
        throw e;
      } finally {
        renderStatus();
      }
    }
  }

  function showError(box, err) {
    if (!box) return;
    box.hidden = !err;
    box.textContent = err ? (err.message || String(err)) : "";
  }

  function showNotice(text) {
    $("notice-text").textContent = text;
    $("notice").hidden = false;
  }
  $("notice-close").addEventListener("click", () => { $("notice").hidden = true; });

  // syncInput shows the tree's value unless the person is typing in it.
  function syncInput(el, value) {
    if (document.activeElement !== el && el.value !== value) el.value = value;
  }

  function renderStatus() {
    const pages = [[grid, "grid"], [doc, "doc"]];
    const server = document.body.dataset.worker;
    // The HTML's worker is where the person was when it was rendered: say
    // so once their pages live elsewhere.
    $("s-moved").hidden = !pages.some(([p]) => p && p.worker && server && p.worker !== server);
    for (const [p, name] of pages) {
      if (!p) continue;
      const w = $("s-" + name + "-worker"), st = $("s-" + name + "-status");
      w.textContent = p.worker || "–";
      w.classList.toggle("moved", !!(p.worker && server && p.worker !== server));
      w.title = p.worker && server && p.worker !== server ? "not the worker that rendered this page: the person moved" : "";
      st.textContent = p.status;
      st.className = "st st-" + p.status;
    }
  }

  // ---- the grid

  const tbody = $("g-body"), wrap = $("g-wrap"), range = $("p-range");
  let headBuilt = false;
  let asked = null;      // the offset last asked for, while a scroll is in flight
  let scrolling = false; // a scroll op is in flight
  let wanted = null;     // the next offset to ask for

  function tree() { return (grid && grid.tree) || {}; }

  function buildHead(meta) {
    const tr = $("g-head");
    tr.textContent = "";
    for (const c of meta.columns) {
      const th = document.createElement("th");
      th.dataset.col = c;
      th.scope = "col";
      th.tabIndex = 0;
      th.textContent = LABELS[c] || c;
      if (NUMERIC[c]) th.className = "num";
      th.addEventListener("click", () => sortOn(c));
      th.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortOn(c); } });
      tr.appendChild(th);
    }
    const sel = $("f-status");
    for (const s of meta.statuses) {
      const o = document.createElement("option");
      o.value = s;
      o.textContent = s;
      sel.appendChild(o);
    }
    headBuilt = true;
  }

  function cell(col, row) {
    const v = row[col];
    if (col === "amount") return money.format(v);
    if (col === "id") return num.format(v);
    return v == null ? "" : String(v);
  }

  function renderGrid(t) {
    const meta = t.meta || {};
    if (!headBuilt && meta.columns) buildHead(meta);
    if (!headBuilt) return;
    const filter = t.filter || {}, sort = t.sort || {};
    const rows = t.rows || [], total = t.total || 0, offset = t.offset || 0;
    // The window the worker sent may be taller than the table's room (the
    // default size, before fitRows has told the worker the room): draw
    // only what fits, so the grid is drawn once at its size, not drawn
    // tall and then refitted.
    const fit = fitCount(), size = Math.min(t.page_size || rows.length, fit || Infinity);

    for (const th of $("g-head").children) {
      const on = th.dataset.col === sort.column;
      th.classList.toggle("sorted", on);
      th.classList.toggle("desc", on && sort.dir === "desc");
      th.setAttribute("aria-sort", on ? (sort.dir === "desc" ? "descending" : "ascending") : "none");
    }
    syncInput($("f-text"), filter.text || "");
    syncInput($("f-status"), filter.status || "");
    syncInput($("f-min"), filter.min_amount ? String(filter.min_amount) : "");

    // One table row per window row, reused from render to render.
    while (tbody.children.length < size) {
      const tr = document.createElement("tr");
      for (const c of meta.columns) {
        const td = document.createElement("td");
        if (NUMERIC[c]) td.className = "num";
        tr.appendChild(td);
      }
      tbody.appendChild(tr);
    }
    while (tbody.children.length > size) tbody.lastChild.remove();
    for (let i = 0; i < tbody.children.length; i++) {
      const tr = tbody.children[i], row = rows[i];
      tr.hidden = !row;
      if (!row) continue;
      tr.dataset.status = row.status;
      meta.columns.forEach((c, j) => {
        const text = cell(c, row);
        if (tr.children[j].textContent !== text) tr.children[j].textContent = text;
      });
    }
    $("g-empty").hidden = total > 0;

    range.max = String(Math.max(0, total - size));
    if (document.activeElement !== range) range.value = String(offset);
    $("p-info").textContent = total
      ? num.format(offset + 1) + "–" + num.format(offset + Math.min(rows.length, size)) + " of " + num.format(total)
      : "0 of " + num.format(meta.row_count || 0);
    $("s-query").textContent = num.format(total) + " matching · query " + (t.took_ms || 0).toFixed(2) + " ms · " +
      (t.cache === "hit" ? "cached index" : "index built");
    renderStatus();
    fitRows();
  }

  function sortOn(col) {
    const s = tree().sort || {};
    const dir = s.column === col && s.dir === "asc" ? "desc" : "asc";
    send(grid, { op: "sort", column: col, dir: dir }, $("g-error")).catch(() => {});
  }

  // scrollTo asks for the window at offset; while one scroll is in flight,
  // only the latest offset asked for goes next, so a fast wheel sends few ops.
  function scrollTo(offset) {
    const t = tree();
    const last = Math.max(0, (t.total || 0) - (t.page_size || 0));
    wanted = Math.max(0, Math.min(last, Math.round(offset)));
    pump();
  }

  function scrollBy(rows) {
    const base = wanted !== null ? wanted : asked !== null ? asked : tree().offset || 0;
    scrollTo(base + rows);
  }

  async function pump() {
    if (scrolling) return;
    scrolling = true;
    try {
      while (wanted !== null) {
        asked = wanted;
        wanted = null;
        if (asked === tree().offset) continue;
        await send(grid, { op: "scroll", offset: asked }, $("g-error")).catch(() => {});
      }
    } finally {
      scrolling = false;
      asked = null;
    }
  }

  function pageRows() { return tree().page_size || 1; }

  wrap.addEventListener("wheel", (e) => {
    if (!e.deltaY) return;
    e.preventDefault();
    let rows;
    if (e.deltaMode === 1) rows = e.deltaY;                       // lines
    else if (e.deltaMode === 2) rows = e.deltaY * pageRows();     // pages
    else rows = Math.sign(e.deltaY) * Math.max(1, Math.round(Math.abs(e.deltaY) / 26));
    scrollBy(rows);
  }, { passive: false });

  wrap.addEventListener("keydown", (e) => {
    const moves = {
      ArrowDown: 1, ArrowUp: -1, PageDown: pageRows(), PageUp: -pageRows(),
      Home: -Infinity, End: Infinity,
    };
    if (!(e.key in moves)) return;
    e.preventDefault();
    const m = moves[e.key];
    if (m === -Infinity) scrollTo(0);
    else if (m === Infinity) scrollTo(Number.MAX_SAFE_INTEGER);
    else scrollBy(m);
  });

  $("p-first").addEventListener("click", () => scrollTo(0));
  $("p-prev").addEventListener("click", () => scrollBy(-pageRows()));
  $("p-next").addEventListener("click", () => scrollBy(pageRows()));
  $("p-last").addEventListener("click", () => scrollTo(Number.MAX_SAFE_INTEGER));
  range.addEventListener("input", () => scrollTo(Number(range.value)));

  const sendText = debounce(() => {
    send(grid, { op: "filter", text: $("f-text").value }, $("g-error")).catch(() => {});
  }, 200);
  $("f-text").addEventListener("input", sendText);
  $("f-status").addEventListener("change", () => {
    send(grid, { op: "filter", status: $("f-status").value }, $("g-error")).catch(() => {});
  });
  const sendMin = debounce(() => {
    const raw = $("f-min").value.trim();
    const v = raw === "" ? 0 : Number(raw);
    if (!Number.isFinite(v)) { showError($("g-error"), new Error("min amount: not a number")); return; }
    send(grid, { op: "filter", min_amount: v }, $("g-error")).catch(() => {});
  }, 300);
  $("f-min").addEventListener("input", sendMin);
  $("g-reset").addEventListener("click", () => {
    $("f-text").value = "";
    $("f-min").value = "";
    send(grid, { op: "reset" }, $("g-error")).then(fitRows, () => {});
  });

  // fitRows makes the window as tall as the table's room: the window the
  // worker sends is exactly what is visible, and the wheel moves it.
  let fitting = false;
  function fitRows() {
    const t = tree();
    if (fitting || !t.page_size || !headBuilt) return;
    const fit = fitCount();
    if (!fit || fit === t.page_size) return;
    fitting = true;
    send(grid, { op: "scroll", offset: t.offset || 0, page_size: fit }, $("g-error"))
      .catch(() => {})
      .finally(() => { fitting = false; });
  }
  window.addEventListener("resize", debounce(fitRows, 150));

  // fitCount is how many rows the table's room holds (MIN_ROWS to
  // MAX_ROWS), or 0 while it cannot be measured.
  function fitCount() {
    if (!wrap.clientHeight) return 0;
    const head = $("g-head").getBoundingClientRect().height || 30;
    const rowH = parseFloat(getComputedStyle(document.documentElement).getPropertyValue("--row-h")) || 26;
    const fit = Math.floor((wrap.clientHeight - head) / rowH);
    return Number.isFinite(fit) ? Math.max(MIN_ROWS, Math.min(MAX_ROWS, fit)) : 0;
  }

  // ---- the document

  const title = $("d-title"), text = $("d-body");
  let dirty = false; // the inputs hold an edit the tree does not have yet

  function renderDoc(t) {
    if (!dirty) {
      syncInput(title, t.title || "");
      syncInput(text, t.body || "");
    }
    const words = t.words || 0, chars = t.chars || 0;
    $("d-count").textContent = num.format(words) + (words === 1 ? " word" : " words") + ", " + num.format(chars) + " characters";
    $("d-edited").textContent = t.edited_at
      ? "edited " + new Date(t.edited_at).toLocaleString() + " (" + num.format(t.edits || 0) + (t.edits === 1 ? " edit)" : " edits)")
      : "not edited yet";
    renderStatus();
  }

  const sendEdit = debounce(() => {
    const sent = { op: "edit", title: title.value, body: text.value };
    send(doc, sent, $("d-error")).then(() => {
      if (title.value === sent.title && text.value === sent.body) {
        dirty = false;
        renderDoc(doc.tree);
      }
    }, () => {});
  }, 300);
  for (const el of [title, text]) {
    el.addEventListener("input", () => { dirty = true; sendEdit(); });
  }

  // ---- the pages

  grid = stickyd.page({ kind: "grid", onChange: renderGrid, onNotice: showNotice, onStatus: renderStatus });
  doc = stickyd.page({ kind: "doc", onChange: renderDoc, onNotice: showNotice, onStatus: renderStatus });
  // page.worker changes on any answer, even one without deltas.
  setInterval(renderStatus, 1000);
  renderStatus();
})();
