// stickyd page client: served by every front at /_stickyd/client.js.
//
//   const page = stickyd.page({
//     kind: "grid",                      // page kind, sent when the page opens
//     onChange: (tree, deltas) => {},     // after deltas were applied to page.tree
//     onNotice: (text) => {},             // the page restarted clean, and why
//     onStatus: (status) => {},           // "connecting" | "live" | "offline" | "polling" | "unauthorized" | "failed"
//     transport: "poll",                   // optional: the long-poll fallback from the start
//   });
//   const answer = await page.send({op: "filter", text: "abc"});
//   page.tree       // the page's data tree, kept equal to the worker's
//   page.worker     // the worker holding the page now
//   page.transport  // "websocket" | "poll": what the page uses now
//
//   // Optional binding: parts of the DOM drawn from the tree, drawn again
//   // when a delta touches them.
//   page.bind(el, "filter", (f) => f || "everything");
//   page.bindList(ul, "tasks", (t) => stickyd.html`<li>${t.title}</li>`);
//
// Delivery is pulled: the client keeps one pull outstanding and applies the
// deltas it gets, in sequence order; a reconnect resumes after the last
// sequence applied, so nothing is lost or applied twice. The page id lives in
// sessionStorage: a reload of the tab resumes the same page.
//
// Every message carries a msg_id of its own. One in flight when the
// connection drops (a restart, a move, a network blip) is sent again after
// the reconnect with the same msg_id, and the worker answers a msg_id it
// already ran from memory: each message runs once and gets its answer. A
// message is sent at most MAX_RESENDS times again, then its promise rejects
// (gave_up); one over the front's limit is never sent (too_large).
(function (global) {
  "use strict";
  const PREFIX = "/_stickyd";
  const PULL_WAIT = 25000;
  const MAX_BACKOFF = 30000;
  // MAX_RESENDS bounds how often one message is sent again, whatever the
  // cause (a refusal for now, a lost answer, a socket that closed with it in
  // flight); with the backoff, one to two minutes.
  const MAX_RESENDS = 10;
  // MAX_BATCH is the most ops the front reads in one frame.
  const MAX_BATCH = 64;
  // UNKNOWN_BATCH_BYTES bounds a frame of several ops while the front's
  // limit is unknown (a hello that did not say it): an op bigger than it
  // leaves alone, so that a 1009 for it names it, not a frame it shared.
  const UNKNOWN_BATCH_BYTES = 64 << 10;
  // PROBE_MAX bounds the wait between two tries of the WebSocket while a
  // page is on the long-poll fallback.
  const PROBE_MAX = 15000;
  // LIMIT_HEADER is how the fallback's answers say the front's limit.
  const LIMIT_HEADER = "X-Stickyd-Max-Message-Bytes";

  // backoff is a retry delay that doubles from base to cap (MAX_BACKOFF
  // unless given), each one jittered (half to the whole of it), so that
  // pages that failed together do not come back together; ok resets it.
  function backoff(base, cap) {
    let n = 0;
    cap = cap || MAX_BACKOFF;
    return {
      next() { const d = Math.min(cap, base * 2 ** n++); return d / 2 + Math.random() * d / 2; },
      ok() { n = 0; },
    };
  }

  // afterTurn runs fn once the current task and the promise callbacks it
  // set off have run (a message channel's task: no timer's clamping), so
  // that what they send leaves together.
  const afterTurn = (() => {
    if (typeof MessageChannel === "undefined") return (fn) => setTimeout(fn, 0);
    const ch = new MessageChannel(), fns = [];
    ch.port1.onmessage = () => { for (const fn of fns.splice(0)) fn(); };
    return (fn) => { fns.push(fn); if (fns.length === 1) ch.port2.postMessage(0); };
  })();

  // utf8Length is the length of s in UTF-8, as a WebSocket or fetch sends
  // it (a lone surrogate becomes U+FFFD, three bytes).
  function utf8Length(s) {
    let n = 0;
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c < 0x80) n += 1;
      else if (c < 0x800) n += 2;
      else if (c >= 0xd800 && c < 0xdc00 && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) { n += 4; i++; }
      else n += 3;
    }
    return n;
  }

  // refusal is the error a page's promise rejects with (client.d.ts's
  // PageError).
  function refusal(message, code, retry) {
    const e = new Error(message);
    e.code = code;
    e.retry = !!retry;
    return e;
  }

  function setPath(tree, path, value) {
    const segs = path.split("/");
    let cur = tree;
    for (let i = 0; i < segs.length - 1; i++) {
      const s = segs[i];
      if (cur[s] === null || typeof cur[s] !== "object") cur[s] = {};
      cur = cur[s];
    }
    cur[segs[segs.length - 1]] = value;
  }

  function deletePath(tree, path) {
    const segs = path.split("/");
    let cur = tree;
    for (let i = 0; i < segs.length - 1; i++) {
      cur = cur[segs[i]];
      if (cur === null || typeof cur !== "object") return;
    }
    delete cur[segs[segs.length - 1]];
  }

  // touches says whether delta d changes the value at path (a reset, or a
  // write at, under or above it).
  function touches(d, path) {
    if (d.op === "reset" || !d.path || !path) return true;
    return d.path === path || d.path.startsWith(path + "/") || path.startsWith(d.path + "/");
  }

  function valueAt(tree, path) {
    let cur = tree;
    for (const s of path ? path.split("/") : []) {
      if (cur === null || typeof cur !== "object") return undefined;
      cur = cur[s];
    }
    return cur;
  }

  // node is what a render returned, as a DOM node: a Node as is, anything
  // else as text (never parsed as HTML).
  function node(v) {
    if (v && typeof v === "object" && typeof v.nodeType === "number") return v;
    return global.document.createTextNode(v === undefined || v === null ? "" : String(v));
  }

  // draw puts what a render returned in el (undefined: it drew el itself).
  function draw(el, v) {
    if (v === undefined) return;
    if (v && typeof v === "object" && typeof v.nodeType === "number") el.replaceChildren(v);
    else el.textContent = v === null ? "" : String(v);
  }

  // html is a tagged template that builds DOM from markup whose
  // interpolations are text, never markup: html`<li>${task.title}</li>`
  // returns the element (or a fragment, for several). A Node or an array
  // of them may be interpolated as content.
  function html(strings, ...values) {
    const slots = [];
    let markup = strings[0];
    values.forEach((v, i) => {
      slots.push(v);
      markup += "<!--s" + i + "-->" + strings[i + 1];
    });
    const t = global.document.createElement("template");
    t.innerHTML = markup;
    const walker = global.document.createTreeWalker(t.content, 128 /* comments */);
    const marks = [];
    while (walker.nextNode()) marks.push(walker.currentNode);
    for (const m of marks) {
      const i = /^s(\d+)$/.exec(m.data);
      if (!i) continue;
      const v = slots[+i[1]];
      const parts = Array.isArray(v) ? v : [v];
      m.replaceWith(...parts.map(node));
    }
    // In an attribute the marks are text: each becomes its value, as text
    // (an on* handler may not take one; a URL that would run script is
    // dropped).
    for (const e of t.content.querySelectorAll("*")) {
      for (const a of Array.from(e.attributes)) {
        if (!a.value.includes("<!--s")) continue;
        if (/^on/i.test(a.name)) throw new Error("stickyd.html: no value may be interpolated into " + a.name);
        let v = a.value.replace(/<!--s(\d+)-->/g, (_, i) => String(slots[+i] ?? ""));
        if (/^(href|src|action|formaction|xlink:href)$/i.test(a.name) && /^\s*(javascript|vbscript|data):/i.test(v)) v = "";
        e.setAttribute(a.name, v);
      }
    }
    return t.content.childNodes.length === 1 ? t.content.firstChild : t.content;
  }

  function newID() {
    const a = new Uint8Array(12);
    (global.crypto || {}).getRandomValues ? global.crypto.getRandomValues(a) : a.forEach((_, i) => (a[i] = Math.random() * 256));
    return "p" + Array.from(a, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function page(opts) {
    opts = opts || {};
    const kind = opts.kind || "page";
    const key = "stickyd.page." + kind;
    let id = opts.id || global.sessionStorage.getItem(key);
    if (!id) {
      id = newID();
      global.sessionStorage.setItem(key, id);
    }
    const forcePoll = opts.transport === "poll";
    const p = {
      id: id, kind: kind, tree: {}, last: 0, worker: "", status: "connecting",
      transport: forcePoll ? "poll" : "websocket",
      send: send, close: close, bind: bind, bindList: bindList,
    };
    // bindings are the parts of the page's DOM drawn from paths of its
    // tree (bind, bindList): each is drawn again when a delta touches it.
    const bindings = new Set();
    // pending holds the ops sent or waiting on the WebSocket, by op id: a
    // waiter {resolve, reject, msg, sent, tries, retry, backingOff, frame}.
    // queue holds the ops not sent yet, in order.
    let ws = null, nextID = 1, pending = new Map(), opened = false, closed = false;
    // batching is set once the front said it reads ops sent together
    // (its hello on a socket opened with ?batch=1): the ops of one turn
    // then leave in one frame, a JSON array (an older front never says so).
    let batching = false, outbox = [];
    // maxBytes is the largest op the front reads (front.max_message_bytes,
    // said by its hello and by the fallback's answers; 0 until known): a
    // bigger message is refused here, too_large, and never sent. guessed
    // says it was learned from a 1009 close instead (an upper bound).
    let maxBytes = 0, guessed = false;
    // Messages are named msgPrefix-n: unique to this page object (a reload
    // starts another), so the worker's memory of one never answers another.
    const msgPrefix = newID().slice(1, 13);
    let nextMsg = 1;
    let failures = 0, polling = false, pulling = false, queue = [];
    let toldUnauthorized = false;
    // On the fallback: pollTimer opens the page again after a refusal,
    // pollPull can abort the pull waiting there, probeTimer tries the
    // WebSocket again (probing while one try is under way).
    let pollTimer = 0, pollPull = null, probeTimer = 0, probing = false;
    const pullRetry = backoff(250), openRetry = backoff(1000), connectRetry = backoff(200);
    const probeRetry = backoff(1000, PROBE_MAX);

    function status(s) {
      if (p.status !== s) { p.status = s; opts.onStatus && opts.onStatus(s); }
    }

    function apply(deltas) {
      const fresh = [];
      for (const d of deltas) {
        if (d.seq <= p.last) continue; // already applied: never twice
        if (d.op === "reset" || (d.op === "set" && !d.path)) {
          p.tree = d.value || {};
          // A RESET that says why (restored from a checkpoint, restarted
          // clean) is shown to the person.
          if (d.notice && opts.onNotice) opts.onNotice(d.notice);
        }
        else if (d.op === "delete") deletePath(p.tree, d.path);
        else setPath(p.tree, d.path, d.value);
        p.last = d.seq;
        fresh.push(d);
      }
      if (fresh.length && opts.onChange) opts.onChange(p.tree, fresh);
      if (fresh.length) for (const b of bindings) b.update(fresh);
    }

    // bind draws the value at path into el with render(value, el), now and
    // whenever a delta touches that value (a write at, under or above
    // path). render returns a string (el's text), a Node (el's content), or
    // nothing (it drew el itself). It returns a function that unbinds.
    function bind(el, path, render) {
      const b = {
        update(deltas) {
          if (deltas && !deltas.some((d) => touches(d, path))) return;
          draw(el, render(valueAt(p.tree, path), el));
        },
      };
      bindings.add(b);
      b.update(null);
      return () => bindings.delete(b);
    }

    // bindList keeps one child of el per entry of the map (or list) at
    // path, drawn by item(value, key) (a Node, or a string for a text
    // child) and marked data-key: a delta under one entry draws that entry
    // again, one at or above path every entry. opts.order(a, b), over
    // [key, value] pairs, orders the children (default: by key); opts.empty,
    // a Node or string, is shown while there is no entry.
    function bindList(el, path, item, opts) {
      opts = opts || {};
      const children = new Map();
      const b = {
        update(deltas) {
          const all = valueAt(p.tree, path);
          const entries = all && typeof all === "object" ? Object.entries(all) : [];
          let dirty = null; // keys to draw again; null: all
          if (deltas) {
            dirty = new Set();
            for (const d of deltas) {
              if (!touches(d, path)) continue;
              const rest = d.op === "reset" || !d.path || d.path.length <= path.length ? null : d.path.slice(path.length + (path ? 1 : 0));
              if (rest === null) { dirty = null; break; }
              dirty.add(rest.split("/")[0]);
            }
            if (dirty && dirty.size === 0) return;
          }
          const keep = new Set();
          for (const [key, value] of entries) {
            keep.add(key);
            let c = children.get(key);
            if (!c || !dirty || dirty.has(key)) {
              const n = node(item(value, key));
              if (n.nodeType === 1) n.dataset.key = key;
              if (c) c.replaceWith(n);
              children.set(key, (c = n));
            }
          }
          for (const [key, c] of children) if (!keep.has(key)) { c.remove(); children.delete(key); }
          const order = opts.order || ((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
          const want = entries.filter(([k]) => children.has(k)).sort(order).map(([k]) => children.get(k));
          if (!want.length && opts.empty !== undefined) { draw(el, opts.empty); return; }
          if (want.length !== el.childNodes.length || want.some((c, i) => el.childNodes[i] !== c)) el.replaceChildren(...want);
        },
      };
      bindings.add(b);
      b.update(null);
      return () => bindings.delete(b);
    }

    function request(msg) {
      msg.id = nextID++;
      msg.page = id;
      return new Promise((resolve, reject) => {
        if (polling) { poll(msg, resolve, reject, 0); return; }
        pending.set(msg.id, { resolve, reject, msg, sent: false, tries: 0 });
        queue.push(msg);
        drain();
      });
    }

    // over reports an op the front would refuse as too large (more bytes
    // as sent than it reads), and tooLarge is that refusal.
    function over(s) {
      return maxBytes > 0 && s.length * 3 > maxBytes && (s.length > maxBytes || utf8Length(s) > maxBytes);
    }
    function tooLarge(s) {
      const why = guessed ? "the front closed the socket on it (1009: over front.max_message_bytes); it is not sent again"
        : "the front reads at most " + maxBytes + " (front.max_message_bytes); it was not sent";
      return refusal("the message is " + utf8Length(s) + " bytes as sent; " + why, "too_large", false);
    }

    // gaveUp is the refusal of a message sent MAX_RESENDS times again
    // without an answer; why is the last failure.
    function gaveUp(why) {
      return refusal("no answer after " + (MAX_RESENDS + 1) + " sends (last: " + why + "); it may have run", "gave_up", false);
    }

    // poll sends one op on the long-poll fallback; a message is sent again
    // after a refusal for now or a lost answer, tries counting the resends
    // so far.
    function poll(msg, resolve, reject, tries) {
      const retry = backoff(250);
      const post = () => {
        const body = JSON.stringify(msg);
        if (msg.op === "msg" && over(body)) { reject(tooLarge(body)); return; }
        // The pull that waits here is aborted when the page goes back to
        // the WebSocket.
        const ctl = msg.op === "pull" && typeof AbortController !== "undefined" ? new AbortController() : null;
        if (ctl) pollPull = ctl;
        const done = () => { if (pollPull === ctl) pollPull = null; };
        fetch(PREFIX + "/op", { method: "POST", credentials: "same-origin", body: body, signal: ctl ? ctl.signal : undefined })
          .then((r) => {
            const limit = +r.headers.get(LIMIT_HEADER);
            if (limit > 0) { maxBytes = limit; guessed = false; }
            return r.json().catch(() => ({})).then((m) => {
              // Every answer but a 200 is a refusal, whatever its shape.
              if (!r.ok && m.op !== "error") m = { op: "error", error: m.error || "HTTP " + r.status, retry: r.status >= 500 || !!m.retry };
              if (!r.ok && !m.code && r.status === 401) m.code = "no_connection";
              if (!r.ok && !m.code && r.status === 413) m.code = "too_large";
              return m;
            });
          })
          .then((m) => {
            done();
            // Refused for now (the person is moving, the worker restarting):
            // it did not run; a message is sent again after a while.
            if (m.op === "error" && m.retry && msg.op === "msg" && !closed) {
              if (tries++ < MAX_RESENDS) setTimeout(post, retry.next());
              else reject(gaveUp(m.error));
              return;
            }
            handle(m, resolve, reject);
          }, (e) => {
            done();
            // The answer was lost on the way: a message is sent again (its
            // msg_id answers it from memory if it ran).
            if (msg.op === "msg" && !closed) {
              if (tries++ < MAX_RESENDS) setTimeout(post, retry.next());
              else reject(gaveUp(e.message));
              return;
            }
            e.retry = true; reject(e);
          });
      };
      post();
    }

    // resend sends a message again (or once the page is open again), with
    // a new op id and the same msg_id.
    function resend(w) {
      if (closed) return; // close() refused it
      w.msg.id = nextID++;
      w.sent = false;
      w.frame = null;
      pending.set(w.msg.id, w);
      queue.push(w.msg);
      drain();
    }

    // drain sends what waits, in order: on the fallback once the page is
    // open there, on the socket once it is open (an open at once, the rest
    // once the page is open). A message sent again waits out its backoff,
    // and holds the messages behind it: they still run in the order sent.
    function drain() {
      const rest = [];
      let hold = false;
      for (const q of queue) {
        const w = pending.get(q.id);
        if (!w) continue; // failed meanwhile
        if (polling) {
          if (!opened) { rest.push(q); continue; }
          pending.delete(q.id);
          poll(q, w.resolve, w.reject, w.tries);
          continue;
        }
        if (!ws || ws.readyState !== 1 || !(opened || q.op === "open")) { rest.push(q); continue; }
        if (q.op === "msg" && (hold || w.backingOff)) { hold = true; rest.push(q); continue; }
        w.sent = wsSend(w);
      }
      queue = rest;
    }

    // wsSend sends an op on the open socket: at once, or, to a front that
    // reads batches, with the other ops of this turn in one frame (a pull
    // sent again as an answer arrives and the message the app sends on
    // that answer go together). A message over the front's limit is
    // refused here instead; it reports whether the op went.
    function wsSend(w) {
      const s = JSON.stringify(w.msg);
      if (w.msg.op === "msg" && over(s)) {
        pending.delete(w.msg.id);
        w.reject(tooLarge(s));
        return false;
      }
      if (!batching) { w.frame = s; ws.send(s); return true; }
      outbox.push({ s: s, w: w });
      if (outbox.length === 1) afterTurn(flush);
      return true;
    }

    // flush sends the ops of this turn, as few frames as the front reads:
    // at most MAX_BATCH ops and maxBytes each (one op alone never is over
    // it: wsSend refused it). While the limit is unknown, ops go together
    // up to UNKNOWN_BATCH_BYTES only: a bigger op goes alone, and a 1009
    // for it then refuses it (onclose), never the frame it shared with a
    // pull, which would leave it under the guess, sent again.
    function flush() {
      const ops = outbox.splice(0);
      // A socket that closed meanwhile: its onclose sends them again.
      if (!ws || ws.readyState !== 1) return;
      const limit = maxBytes || UNKNOWN_BATCH_BYTES;
      // (At least one byte a UTF-16 unit: a longer string is over it.)
      const size = (o) => (o.s.length > limit ? o.s.length : utf8Length(o.s));
      while (ops.length) {
        let n = 1, bytes = size(ops[0]) + 2;
        while (n < ops.length && n < MAX_BATCH && bytes + 1 + size(ops[n]) <= limit) bytes += 1 + size(ops[n++]);
        const part = ops.splice(0, n);
        const frame = n === 1 ? part[0].s : "[" + part.map((o) => o.s).join(",") + "]";
        for (const o of part) o.w.frame = frame;
        ws.send(frame);
      }
    }

    function handle(m, resolve, reject) {
      if (m.worker) p.worker = m.worker;
      if (m.op === "error") reject(refusal(m.error, m.code, m.retry));
      else resolve(m);
    }

    function onOpened(m) {
      const o = m.opened || {};
      if (o.resync) { p.tree = {}; p.last = o.base || 0; }
      if (o.notice && opts.onNotice) opts.onNotice(o.notice);
      opened = true;
      openRetry.ok();
      // A socket that opens the page is one that works: the next
      // reconnect starts from the shortest wait again (a socket that only
      // opens, then closes, keeps backing off).
      if (!polling) connectRetry.ok();
      toldUnauthorized = false;
      status(polling ? "polling" : "live");
      drain();
      pullLoop();
    }

    async function pullLoop() {
      if (pulling || closed) return;
      pulling = true;
      try {
        while (!closed && opened) {
          const m = await request({ op: "pull", after: p.last, wait: PULL_WAIT });
          pullRetry.ok();
          apply(m.deltas || []);
        }
      } catch (e) {
        if (!closed) recover(e);
      } finally {
        pulling = false;
      }
    }

    // recover restarts delivery after a failed pull. A lost connection is
    // the reconnect's business; a page the worker no longer holds (its
    // worker died) is opened again, and the worker answers with a notice
    // and a fresh tree; anything else is retried.
    function recover(e) {
      const open = ws && ws.readyState === 1;
      if (!polling && !open) return; // the reconnect reopens the page
      if (e && e.code === "no_connection") { unauthorized(); return; }
      if (e && e.code === "bad_request") {
        opened = false;
        openPage();
        return;
      }
      setTimeout(pullLoop, pullRetry.next());
    }

    // openPage opens the page on the transport used now; an answer that
    // comes once the page uses another (a socket that closed, the fallback
    // left for the WebSocket) is dropped.
    function openPage() {
      const via = polling ? null : ws;
      const current = () => !closed && (via ? ws === via : polling);
      request({ op: "open", kind: kind, after: p.last }).then(
        (m) => { if (current()) onOpened(m); },
        (e) => { if (current()) openFailed(e); });
    }

    // unauthorized is a fallback whose cookie no longer names a
    // connection (expired, or the site's keys changed): said once, then
    // tried again rarely (another tab may renew the cookie), never in a
    // tight loop.
    function unauthorized() {
      opened = false;
      if (!toldUnauthorized && opts.onNotice) opts.onNotice("This page lost its connection to the site: reload the page.");
      toldUnauthorized = true;
      status("unauthorized");
      clearTimeout(pollTimer);
      pollTimer = setTimeout(startPolling, openRetry.next());
    }

    // openFailed handles a refused open: a transient failure retries, a
    // refusal (unknown page kind, bad request) is shown and stops.
    function openFailed(e) {
      if (e && e.code === "no_connection" && polling) { unauthorized(); return; }
      if (e && e.retry) {
        if (polling) { clearTimeout(pollTimer); pollTimer = setTimeout(startPolling, openRetry.next()); }
        else if (ws) ws.close();
        return;
      }
      closed = true;
      status("failed");
      if (opts.onNotice) opts.onNotice("This page could not open: " + (e && e.message));
      if (ws) ws.close();
    }

    function newSocket() {
      const proto = global.location.protocol === "https:" ? "wss:" : "ws:";
      return new WebSocket(proto + "//" + global.location.host + PREFIX + "/ws?batch=1");
    }

    function connect() {
      if (closed) return;
      status("connecting");
      use(newSocket());
    }

    // use makes sock the page's socket (a new one, or an open one a probe
    // found while the page was on the fallback).
    function use(sock) {
      batching = false;
      outbox = [];
      ws = sock;
      p.transport = "websocket";
      sock.onopen = () => {
        failures = 0;
        openPage();
      };
      sock.onmessage = (ev) => {
        const m = JSON.parse(ev.data);
        if (Array.isArray(m)) m.forEach(answer);
        else answer(m);
      };
      // answer takes one answer of the front, in the order they came.
      const answer = (m) => {
        if (m.op === "hello") {
          batching = !!m.batch;
          if (m.max_message_bytes > 0) { maxBytes = m.max_message_bytes; guessed = false; }
          return;
        }
        if (m.op === "renew") {
          // The connection cookie is past half its life: fetch a new one,
          // so that the next reconnect still names this session.
          fetch(PREFIX + "/renew", { method: "POST", credentials: "same-origin" }).catch(() => {});
          return;
        }
        const w = pending.get(m.id);
        if (!w) return;
        pending.delete(m.id);
        if (m.op === "error" && m.retry && w.msg.op === "msg") {
          // Refused for now, did not run: sent again after a while, at
          // most MAX_RESENDS times.
          if (++w.tries > MAX_RESENDS) { w.reject(gaveUp(m.error)); return; }
          w.retry = w.retry || backoff(250);
          setTimeout(() => resend(w), w.retry.next());
          return;
        }
        handle(m, w.resolve, w.reject);
      };
      sock.onclose = (ev) => {
        if (ws !== sock) return;
        opened = false;
        ws = null;
        // 1009: the front refused a frame as too large (it did not say
        // its limit, or a frame grew past it). The largest frame in
        // flight is one such (those after it were never read): the front
        // reads less than it, and a message that alone is over that now
        // is refused below rather than sent again. (A big op had that
        // frame to itself: flush.)
        if (ev && ev.code === 1009) {
          let largest = 0;
          for (const w of pending.values()) if (w.sent && w.frame) largest = Math.max(largest, utf8Length(w.frame));
          if (largest > 0 && (!maxBytes || largest <= maxBytes)) { maxBytes = largest - 1; guessed = true; }
        }
        // A message in flight is sent again after the reconnect (its
        // msg_id keeps it from running twice), after a backoff and at most
        // MAX_RESENDS times, before the messages that wait; any other
        // request is failed with a retryable error. The pull loop resumes
        // on its own after the reconnect, from the sequence it really has.
        const again = [];
        for (const [k, w] of pending) {
          if (!w.sent) continue; // still queued: goes out after the reconnect
          pending.delete(k);
          if (w.msg.op !== "msg") { w.reject(refusal("connection lost", undefined, true)); continue; }
          const s = JSON.stringify(w.msg);
          if (over(s)) { w.reject(tooLarge(s)); continue; }
          if (++w.tries > MAX_RESENDS) { w.reject(gaveUp("the connection closed (" + (ev ? ev.code : "") + ")")); continue; }
          w.retry = w.retry || backoff(250);
          w.backingOff = true;
          setTimeout(() => { w.backingOff = false; drain(); }, w.retry.next());
          w.msg.id = nextID++;
          w.sent = false;
          w.frame = null;
          pending.set(w.msg.id, w);
          again.push(w.msg);
        }
        queue = again.concat(queue);
        if (closed) return;
        // A front going away (1001: it is stopping) is back in a moment:
        // a restart gets more tries on the WebSocket before the fallback.
        if (ev && ev.code === 1001) failures = -8;
        failures++;
        if (failures >= 4 && !polling) { startPolling(); return; }
        status("offline");
        setTimeout(connect, Math.min(5000, connectRetry.next()));
      };
      if (sock.readyState === 1) sock.onopen();
    }

    function startPolling() {
      pollTimer = 0;
      if (closed) return;
      polling = true;
      p.transport = "poll";
      status("polling");
      openPage();
      probeLater();
    }

    // probeLater has the WebSocket tried again, after a backoff, while the
    // page is on a fallback it did not ask for (it fell back after
    // refused connects: an agent restarting, a crash).
    function probeLater() {
      if (forcePoll || probeTimer || probing || closed) return;
      probeTimer = setTimeout(probe, probeRetry.next());
    }

    // probe opens a WebSocket; once one opens, the page goes back to it:
    // the pull waiting on the fallback is aborted, and the page opens on
    // the socket. Messages on their way over the fallback finish there.
    function probe() {
      probeTimer = 0;
      if (closed || !polling) return;
      let sock;
      try { sock = newSocket(); } catch (e) { probeLater(); return; }
      probing = true;
      sock.onclose = () => { probing = false; probeLater(); };
      sock.onopen = () => {
        probing = false;
        if (closed || !polling) { sock.onclose = null; sock.close(); return; }
        probeRetry.ok();
        polling = false;
        opened = false;
        clearTimeout(pollTimer);
        pollTimer = 0;
        if (pollPull) { pollPull.abort(); pollPull = null; }
        status("connecting");
        use(sock);
      };
    }

    function send(data) {
      // A value JSON cannot say is refused here, never sent.
      let body;
      try { body = JSON.stringify(data); } catch (e) { return Promise.reject(refusal("the message is not JSON: " + e.message, "bad_request", false)); }
      if (body === undefined) return Promise.reject(refusal("the message is not JSON: " + typeof data, "bad_request", false));
      return request({ op: "msg", data: data, msg_id: msgPrefix + "-" + nextMsg++ }).then((m) => {
        // The app refused it (it ran): its code and retry, as it said them.
        if (m.error) throw refusal(m.error, m.code || "refused", m.retry);
        return m.data;
      });
    }

    // close stops the page; what it still waits for is refused (closed).
    function close() {
      closed = true;
      clearTimeout(probeTimer);
      clearTimeout(pollTimer);
      queue = [];
      for (const w of pending.values()) w.reject(refusal("the page was closed", "closed", false));
      pending.clear();
      if (ws) ws.close();
    }

    if (forcePoll) startPolling(); // no WebSocket at all (a proxy that does not pass them)
    else connect();
    return p;
  }

  global.stickyd = { page: page, html: html };
})(window);
