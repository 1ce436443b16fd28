"""A page's collector: deltas with sequence numbers 1, 2, 3... held until
the page pulls them (plugins/worker/collector.go, the same rules).

A pull says "after N": the collector forgets what is <= N (acknowledged) and
answers what is > N, at once, or when the first arrives, or with nothing
when the wait runs out. Past MAX_PENDING, deltas superseded by a later write
to the same path are dropped (their numbers are skipped); if that is not
enough, everything folds into one RESET carrying the whole tree.
"""

import heapq
import threading
import time

from . import stickyd_pb2 as pb

MAX_PENDING = 4096
# HOLD_MAX bounds how long a running message keeps its deltas from a
# waiting pull (seconds).
HOLD_MAX = 0.02


class Scheduler:
    """One thread running callbacks at their deadlines: the long-poll
    timeouts of every page, without a thread per waiting pull."""

    def __init__(self):
        self._cv = threading.Condition()  # guards _heap, _n, _stopped
        self._heap = []
        self._n = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="stickyd-timers", daemon=True)
        self._thread.start()

    def after(self, delay, fn):
        """Runs fn after delay seconds unless the returned timer is cancelled."""
        t = _Timer(fn)
        with self._cv:
            self._n += 1
            heapq.heappush(self._heap, (time.monotonic() + delay, self._n, t))
            self._cv.notify()
        return t

    def stop(self):
        with self._cv:
            self._stopped = True
            self._cv.notify()

    def _run(self):
        while True:
            with self._cv:
                while not self._stopped:
                    if not self._heap:
                        self._cv.wait()
                        continue
                    deadline = self._heap[0][0]
                    now = time.monotonic()
                    if now < deadline:
                        self._cv.wait(deadline - now)
                        continue
                    break
                if self._stopped:
                    return
                _, _, t = heapq.heappop(self._heap)
            if not t.cancelled:
                t.fn()


class _Timer:
    __slots__ = ("fn", "cancelled")

    def __init__(self, fn):
        self.fn = fn
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class _Waiter:
    __slots__ = ("after", "reply", "timer", "done")

    def __init__(self, after, reply):
        self.after = after
        self.reply = reply
        self.timer = None
        self.done = False


class Collector:
    """The deltas of one page; fold() returns the whole tree's JSON for a
    RESET."""

    def __init__(self, scheduler, fold):
        self._mu = threading.Lock()  # guards everything below
        self._sched = scheduler
        self.fold = fold
        self.seq = 0
        self.floor = 0
        self.pending = []
        self._waiters = []
        # Messages running on the page (hold): their writes wake no waiting
        # pull until the message ends, or HOLD_MAX after its first write,
        # so a message's deltas travel together, before its reply.
        self._held = 0
        self._hold_timer = None

    def hold(self):
        with self._mu:
            self._held += 1

    def release(self):
        with self._mu:
            self._held -= 1
            ready = []
            if self._held == 0:
                if self._hold_timer is not None:
                    self._hold_timer.cancel()
                    self._hold_timer = None
                ready = self._take_waiters_locked()
        self._fire(ready)

    def _flush_held(self):
        with self._mu:
            self._hold_timer = None
            ready = self._take_waiters_locked()
        self._fire(ready)

    def add(self, op, path, value):
        with self._mu:
            self.seq += 1
            d = pb.Delta(seq=self.seq, op=op, path=path)
            if value is not None:
                d.value = value
            self.pending.append(d)
            if len(self.pending) > MAX_PENDING:
                self._coalesce_locked()
                if len(self.pending) > MAX_PENDING * 3 // 4:
                    self._reset_locked()
            ready = []
            if self._held == 0:
                ready = self._take_waiters_locked()
            elif self._hold_timer is None and self._waiters:
                self._hold_timer = self._sched.after(HOLD_MAX, self._flush_held)
        self._fire(ready)

    def _coalesce_locked(self):
        last = {}
        for d in self.pending:
            if d.op != pb.Delta.RESET:
                last[d.path] = d.seq
        self.pending = [d for d in self.pending if d.op == pb.Delta.RESET or last[d.path] == d.seq]

    def _reset_locked(self):
        self.seq += 1
        self.floor = self.seq - 1
        self.pending = [pb.Delta(seq=self.seq, op=pb.Delta.RESET, value=self.fold())]

    def restart_clean(self, notice):
        """Makes the next delta a RESET of the (new) tree carrying notice."""
        with self._mu:
            self._reset_locked()
            self.pending[0].notice = notice
            ready = self._take_waiters_locked()
        self._fire(ready)

    def resync(self):
        """Makes the next delta after the returned base a RESET of the whole
        tree, for a client that lost its copy."""
        with self._mu:
            self._reset_locked()
            base = self.floor
            ready = self._take_waiters_locked()
        self._fire(ready)
        return base

    def restore(self, seq, floor, pending):
        with self._mu:
            self.seq, self.floor, self.pending = seq, floor, list(pending)

    def state(self):
        """(seq, floor, a copy of pending), for a package."""
        with self._mu:
            return self.seq, self.floor, list(self.pending)

    def last(self):
        with self._mu:
            return self.seq

    def _ack_locked(self, after):
        if after <= self.floor:
            return
        i = 0
        while i < len(self.pending) and self.pending[i].seq <= after:
            i += 1
        del self.pending[:i]
        self.floor = min(after, self.seq)

    def _unservable_locked(self, after):
        """Whether some delta a reader at `after` needs is no longer held,
        with no RESET just above the floor replacing them."""
        if after >= self.floor:
            return False
        p = self.pending
        return not p or p[0].op != pb.Delta.RESET or p[0].seq != self.floor + 1

    def _since_locked(self, after):
        for i, d in enumerate(self.pending):
            if d.seq > after:
                return self.pending[i:]
        return []

    def pull(self, after, wait, reply):
        """Answers reply(deltas, last) with the deltas after after: at once
        if there are some (or wait <= 0), otherwise when the first arrives
        or wait seconds pass (with none)."""
        with self._mu:
            if self._unservable_locked(after):
                # The deltas after `after` are gone (another reader of the
                # page acknowledged them: a duplicated tab): the whole tree.
                self._reset_locked()
            self._ack_locked(after)
            ds = self._since_locked(after)
            if ds or wait <= 0:
                seq = self.seq
            else:
                w = _Waiter(after, reply)
                self._waiters.append(w)
                w.timer = self._sched.after(wait, lambda: self._expire(w))
                return
        reply(ds, seq)

    def _expire(self, w):
        with self._mu:
            if w.done:
                return
            w.done = True
            self._waiters.remove(w)
            seq = self.seq
        w.reply([], seq)

    def _take_waiters_locked(self):
        if not self._waiters:
            return []
        out, keep = [], []
        for w in self._waiters:
            ds = self._since_locked(w.after)
            if not ds:
                keep.append(w)
                continue
            w.done = True
            w.timer.cancel()
            out.append((w, ds, self.seq))
        self._waiters = keep
        return out

    @staticmethod
    def _fire(ready):
        for w, ds, seq in ready:
            w.reply(ds, seq)

    def cancel(self):
        """Answers every waiting pull with nothing (the page closes, or its
        person leaves)."""
        with self._mu:
            ws, self._waiters = self._waiters, []
            seq = self.seq
            for w in ws:
                w.done = True
                w.timer.cancel()
        for w in ws:
            w.reply([], seq)
