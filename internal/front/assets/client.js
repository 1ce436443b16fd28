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
//   page.tree    // the page's data tree, kept equal to the worker's
//   page.worker  // the worker holding the page now
//
// Delivery is pulled: the client keeps one pull outstanding and applies the
// deltas it gets, in sequence order; a reconnect resumes after the last
// sequence applied, so nothing is lost or applied twice. The page id lives in
// sessionStorage: a reload of the tab resumes the same page.
//
// Every message carries a msg_id of its own. One in flight when the
// connection drops (a restart, a move, a network blip) is sent again after
// the reconnect with the same msg_id, and the worker answers a msg_id it
// already ran from memory: each message runs once and gets its answer.
(function (global) {
  "use strict";
  const PREFIX = "/_stickyd";
  const PULL_WAIT = 25000;
  const MAX_BACKOFF = 30000;
  // MAX_RESENDS bounds how often one message is sent again after a lost
  // answer or a refusal for now (with the backoff, about two minutes).
  const MAX_RESENDS = 10;

  // backoff is a retry delay that doubles from base to MAX_BACKOFF, each
  // one jittered (half to the whole of it), so that pages that failed
  // together do not come back together; ok resets it.
  function backoff(base) {
    let n = 0;
    return {
      next() { const d = Math.min(MAX_BACKOFF, base * 2 ** n++); return d / 2 + Math.random() * d / 2; },
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
    const p = {
      id: id, kind: kind, tree: {}, last: 0, worker: "", status: "connecting",
      send: send, close: close,
    };
    let ws = null, nextID = 1, pending = new Map(), opened = false, closed = false;
    // batching is set once the front said it reads ops sent together
    // (its hello on a socket opened with ?batch=1): the ops of one turn
    // then leave in one frame, a JSON array (an older front never says so).
    let batching = false, outbox = [];
    // Messages are named msgPrefix-n: unique to this page object (a reload
    // starts another), so the worker's memory of one never answers another.
    const msgPrefix = newID().slice(1, 13);
    let nextMsg = 1;
    let failures = 0, polling = false, pulling = false, queue = [];
    let toldUnauthorized = false;
    const pullRetry = backoff(250), openRetry = backoff(1000), connectRetry = backoff(200);

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
    }

    function request(msg) {
      msg.id = nextID++;
      msg.page = id;
      return new Promise((resolve, reject) => {
        if (polling) { poll(msg, resolve, reject); return; }
        const w = { resolve, reject, msg, sent: false };
        pending.set(msg.id, w);
        if (ws && ws.readyState === 1 && (opened || msg.op === "open")) { wsSend(msg); w.sent = true; }
        else queue.push(msg); // sent once the page is open again
      });
    }

    // poll sends one op on the long-poll fallback.
    function poll(msg, resolve, reject) {
      const retry = backoff(250);
      const post = (tries) => fetch(PREFIX + "/op", { method: "POST", credentials: "same-origin", body: JSON.stringify(msg) })
        .then((r) => r.json().catch(() => ({})).then((m) => {
          // Every answer but a 200 is a refusal, whatever its shape.
          if (!r.ok && m.op !== "error") m = { op: "error", error: m.error || "HTTP " + r.status, retry: r.status >= 500 || !!m.retry };
          if (!r.ok && !m.code && r.status === 401) m.code = "no_connection";
          return m;
        }))
        .then((m) => {
          // Refused for now (the person is moving, the worker restarting):
          // it did not run; a message is sent again after a while.
          if (m.op === "error" && m.retry && msg.op === "msg" && tries < MAX_RESENDS && !closed) { setTimeout(() => post(tries + 1), retry.next()); return; }
          handle(m, resolve, reject);
        }, (e) => {
          // The answer was lost on the way: a message is sent again (its
          // msg_id answers it from memory if it ran).
          if (msg.op === "msg" && tries < MAX_RESENDS && !closed) { setTimeout(() => post(tries + 1), retry.next()); return; }
          e.retry = true; reject(e);
        });
      post(0);
    }

    // resend sends a message again over the WebSocket (or once the page is
    // open again), with a new op id and the same msg_id.
    function resend(w) {
      w.msg.id = nextID++;
      w.sent = false;
      pending.set(w.msg.id, w);
      if (ws && ws.readyState === 1 && opened) { wsSend(w.msg); w.sent = true; }
      else queue.push(w.msg);
    }

    // wsSend sends an op on the open socket: at once, or, to a front that
    // reads batches, with the other ops of this turn in one frame (a pull
    // sent again as an answer arrives and the message the app sends on
    // that answer go together).
    function wsSend(msg) {
      if (!batching) { ws.send(JSON.stringify(msg)); return; }
      outbox.push(msg);
      if (outbox.length === 1) afterTurn(flush);
    }

    function flush() {
      const ops = outbox.splice(0);
      // A socket that closed meanwhile: its onclose sends them again.
      if (!ws || ws.readyState !== 1 || !ops.length) return;
      ws.send(JSON.stringify(ops.length === 1 ? ops[0] : ops));
    }

    function handle(m, resolve, reject) {
      if (m.worker) p.worker = m.worker;
      if (m.op === "error") {
        const e = new Error(m.error); e.retry = !!m.retry; e.code = m.code;
        reject(e);
      } else resolve(m);
    }

    function onOpened(m) {
      const o = m.opened || {};
      if (o.resync) { p.tree = {}; p.last = o.base || 0; }
      if (o.notice && opts.onNotice) opts.onNotice(o.notice);
      opened = true;
      openRetry.ok();
      toldUnauthorized = false;
      status(polling ? "polling" : "live");
      for (const q of queue.splice(0)) {
        const w = pending.get(q.id);
        if (!w) continue;
        if (polling) { pending.delete(q.id); poll(q, w.resolve, w.reject); }
        else if (ws && ws.readyState === 1) { wsSend(q); w.sent = true; }
        else queue.push(q);
      }
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
        request({ op: "open", kind: kind, after: p.last }).then(onOpened, openFailed);
        return;
      }
      setTimeout(pullLoop, pullRetry.next());
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
      setTimeout(startPolling, openRetry.next());
    }

    // openFailed handles a refused open: a transient failure retries, a
    // refusal (unknown page kind, bad request) is shown and stops.
    function openFailed(e) {
      if (e && e.code === "no_connection" && polling) { unauthorized(); return; }
      if (e && e.retry) {
        if (polling) setTimeout(startPolling, openRetry.next());
        else if (ws) ws.close();
        return;
      }
      closed = true;
      status("failed");
      if (opts.onNotice) opts.onNotice("This page could not open: " + (e && e.message));
      if (ws) ws.close();
    }

    function connect() {
      if (closed) return;
      status("connecting");
      const proto = global.location.protocol === "https:" ? "wss:" : "ws:";
      batching = false;
      outbox = [];
      ws = new WebSocket(proto + "//" + global.location.host + PREFIX + "/ws?batch=1");
      ws.onopen = () => {
        failures = 0;
        connectRetry.ok();
        request({ op: "open", kind: kind, after: p.last }).then(onOpened, openFailed);
      };
      ws.onmessage = (ev) => {
        const m = JSON.parse(ev.data);
        if (Array.isArray(m)) m.forEach(answer);
        else answer(m);
      };
      // answer takes one answer of the front, in the order they came.
      const answer = (m) => {
        if (m.op === "hello") { batching = !!m.batch; return; }
        if (m.op === "renew") {
          // The connection cookie is past half its life: fetch a new one,
          // so that the next reconnect still names this session.
          fetch(PREFIX + "/renew", { method: "POST", credentials: "same-origin" }).catch(() => {});
          return;
        }
        const w = pending.get(m.id);
        if (!w) return;
        pending.delete(m.id);
        if (m.op === "error" && m.retry && w.msg.op === "msg" && (w.tries = (w.tries || 0) + 1) <= MAX_RESENDS) {
          // Refused for now, did not run: sent again after a while.
          w.retry = w.retry || backoff(250);
          setTimeout(() => resend(w), w.retry.next());
          return;
        }
        handle(m, w.resolve, w.reject);
      };
      ws.onclose = (ev) => {
        opened = false;
        ws = null;
        // A message in flight is sent again after the reconnect (its
        // msg_id keeps it from running twice); any other request is failed
        // with a retryable error. The pull loop resumes on its own after
        // the reconnect, from the sequence it really has.
        for (const [k, w] of pending) {
          if (!w.sent) continue; // still queued: goes out after the reconnect
          pending.delete(k);
          if (w.msg.op === "msg") {
            // Sent again once the page is open: its msg_id makes the
            // worker answer it from memory if it already ran.
            resend(w);
            continue;
          }
          const e = new Error("connection lost"); e.retry = true; w.reject(e);
        }
        if (closed) return;
        // A front going away (1001: it is stopping) is back in a moment:
        // a restart gets more tries on the WebSocket before the fallback.
        if (ev && ev.code === 1001) failures = -8;
        failures++;
        if (failures >= 4 && !polling) { startPolling(); return; }
        status("offline");
        setTimeout(connect, Math.min(5000, connectRetry.next()));
      };
    }

    function startPolling() {
      polling = true;
      status("polling");
      request({ op: "open", kind: kind, after: p.last }).then(onOpened, openFailed);
    }

    function send(data) {
      return request({ op: "msg", data: data, msg_id: msgPrefix + "-" + nextMsg++ }).then((m) => {
        if (m.error) throw new Error(m.error);
        return m.data;
      });
    }

    function close() {
      closed = true;
      if (ws) ws.close();
    }

    if (opts.transport === "poll") startPolling(); // no WebSocket at all (a proxy that does not pass them)
    else connect();
    return p;
  }

  global.stickyd = { page: page };
})(window);
