"""Crash checkpoints (docs/checkpoints.md), as the Go SDK makes them
(plugins/worker/checkpoint.go).

Now and then the host asks (Checkpoint) for what changed since the last
ask; nobody is frozen. Each person with a change packages, in their own
mailbox between two of their frames, the pages and connections that
changed: one piece each, the same ConnPackage and PagePackage a freeze
writes. The host parks the pieces; if this process dies, the person wakes
on its replacement from their pieces (a Wake with checkpoint set).

A page of CHAIN_MIN bytes or more is sent whole once, from a view of its
tree encoded outside the mailbox, starting a chain; then, while its writes
since stay small beside it, as those writes only (increments the host
replays at a restore). What changed is kept cheaply on the hot path: a
page's first write after its last piece sets a flag and names its person.
"""

import queue
import random
import threading
import time

from . import stickyd_pb2 as pb
from .tree import encode_value

NOTICE_RESTORED = ("This page was restored from its last checkpoint: the worker that held it is gone, "
                   "and changes made after the checkpoint may be lost.")

BATCH = 64  # people packaging at a time, each in their own mailbox
BATCH_WAIT = 5.0  # a person whose mailbox is busy longer stays changed for the next ask
ROUND_TIME = 10.0  # one answer's bound; the people left are for the next ask

CHAIN_MIN = 64 << 10  # the smallest page sent by increments
LINKS_MAX = 32  # a chain's increments
CHAIN_SHARE = 4  # a chain's increments stay under the page's size / CHAIN_SHARE


class WriteLog:
    """A page's writes since its last piece, up to max bytes: past them it
    breaks, and the page's next piece is whole."""

    __slots__ = ("deltas", "bytes", "max", "broken")

    def __init__(self, max_bytes):
        self.deltas = []
        self.bytes = 0
        self.max = max_bytes
        self.broken = False

    def note(self, op, path, value):
        if self.broken:
            return
        self.bytes += len(path) + len(value or b"") + 16
        if self.bytes > self.max:
            self.broken, self.deltas = True, []
            return
        d = pb.Delta(op=op, path=path)
        if value is not None:
            d.value = value
        self.deltas.append(d)


class PageMarks:
    """A page's checkpoint bookkeeping, used from its person's mailbox
    (dirty is set there too, by the page's writes)."""

    __slots__ = ("mark", "dirty", "chain", "link", "chained", "log", "restored_at")

    def __init__(self):
        self.mark = None  # (user, epoch) of the last piece; None: never sent
        self.dirty = False
        self.chain = 0
        self.link = 0
        self.chained = 0
        self.log = None  # WriteLog of the next increment, while a chain runs
        self.restored_at = 0  # the sequence of the RESET a checkpoint wake made

    def next_increment(self, cur):
        return self.mark == cur and self.chain and self.log is not None and not self.log.broken \
            and self.link < LINKS_MAX

    def sent(self, cur, increment, size):
        self.mark = cur
        if increment:
            self.link += 1
            self.chained += self.log.bytes
        else:
            self.chain, self.link, self.chained = 0, 0, 0
            if size >= CHAIN_MIN:
                self.chain = random.getrandbits(64) | 1
        self.log = None
        if self.chain:
            room = size // CHAIN_SHARE - self.chained
            if room > 0:
                self.log = WriteLog(room)


class _Round:
    def __init__(self):
        self.open = True
        self.started = 0
        self.results = queue.Queue()


class Checkpoints:
    """A worker's bookkeeping of what changed, and its answers."""

    def __init__(self, rt):
        self._rt = rt
        self._mu = threading.Lock()
        self._changed = set()
        self._full = set()  # (user, conn, page) asked for whole
        self._gone = []
        self._rounds = {}
        self._next = 0

    # -- what changed (any thread) -------------------------------------------

    def changed_user(self, user):
        with self._mu:
            self._changed.add(user)

    def page_changed(self, page):
        m = page.ck
        if not m.dirty:
            m.dirty = True
            self.changed_user(page.session.user_key())

    def conn_changed(self, s):
        if not s.ck_dirty:
            s.ck_dirty = True
            self.changed_user(s.user_key())

    def _gone_locked(self, mark, conn, page):
        if mark is not None:
            self._gone.append(pb.CheckpointKey(user=mark[0], conn=conn, page=page))

    def page_gone(self, s, p):
        with self._mu:
            self._gone_locked(p.ck.mark, s.conn, p.id)

    def conn_gone(self, s):
        with self._mu:
            self._gone_locked(s.ck_mark, s.conn, "")
            for p in s.pages.values():
                self._gone_locked(p.ck.mark, s.conn, p.id)

    def ask_full(self, user, conn, page):
        with self._mu:
            self._full.add((user, conn, page))
            self._changed.add(user)

    def _take_full(self, user, conn, page):
        with self._mu:
            k = (user, conn, page)
            if k in self._full:
                self._full.discard(k)
                return True
            return False

    # -- the answer (its own thread) -----------------------------------------

    def answer(self, id, c):
        """Answers the host's Checkpoint: the people who changed package in
        their mailboxes, a batch at a time, until the answer holds max_bytes
        (it may pass it by one batch) or its time is up; the others stay
        changed (more is set)."""
        rt = self._rt
        for k in c.full:
            self.ask_full(k.user, k.conn, k.page)
        with self._mu:
            users = sorted(self._changed)
            self._changed = set()
            out = pb.Checkpointed()
            out.gone.extend(self._gone)
            self._gone = []
        size = 0
        began = time.monotonic()
        while users:
            if (c.max_bytes and size >= c.max_bytes) or time.monotonic() - began > ROUND_TIME or rt._closed:
                with self._mu:
                    self._changed.update(users)
                out.more = True
                break
            batch, users = users[:BATCH], users[BATCH:]
            for pieces, later, gone, err in self._package_batch(batch):
                if err is not None:
                    rt._log.warn("packaging a checkpoint", error=str(err))
                    continue
                for piece, cp, release in later:
                    try:
                        piece.package = _encode_later(cp, release)
                    except Exception as e:
                        # The page was marked sent: have it sent whole next time.
                        rt._log.warn("packaging a checkpoint", user=piece.user, page=piece.page, error=str(e))
                        self.ask_full(piece.user, piece.conn, piece.page)
                        continue
                    pieces.append(piece)
                out.pieces.extend(pieces)
                out.gone.extend(gone)
                size += sum(len(p.package) for p in pieces)
        rt._reply(id, checkpointed=out)

    def _package_batch(self, batch):
        r = _Round()
        with self._mu:
            self._next += 1
            n = self._next
            self._rounds[n] = r
        for u in batch:
            # A mailbox item of this SDK's own: its id names the round.
            self._rt._enqueue(u, pb.Envelope(id=n, checkpoint=pb.Checkpoint()))
        out = []
        deadline = time.monotonic() + BATCH_WAIT
        while len(out) < len(batch):
            try:
                out.append(r.results.get(timeout=max(0.0, deadline - time.monotonic())))
                continue
            except queue.Empty:
                pass
            # Those who have not begun give up their turn (and stay changed);
            # those packaging now are waited for.
            with self._mu:
                r.open = False
                started = r.started
            while len(out) < started:
                out.append(r.results.get())
            break
        with self._mu:
            r.open = False
            self._rounds.pop(n, None)
        return out

    def run(self, user, round_id):
        """A person's turn in a checkpoint round, in their mailbox."""
        with self._mu:
            r = self._rounds.get(round_id)
            if r is None or not r.open:
                self._changed.add(user)  # the round gave up on this turn: next time
                return
            r.started += 1
        res = ([], [], [], None)
        try:
            res = self._package_user(user)
        except Exception as e:
            res = ([], [], [], e)
        finally:
            r.results.put(res)

    def _package_user(self, user):
        """A piece for each of user's pages and connections that changed
        since its last piece (or was last sent under another user key or
        epoch), marked sent. In the person's mailbox; a frozen person is
        skipped (moving: their package is the truth). Whole pieces of pages
        of CHAIN_MIN bytes or more are encoded after, outside the mailbox,
        from a view."""
        rt = self._rt
        with rt._mu:
            if user in rt._frozen:
                return [], [], [], None
            epoch = rt._epochs.get(user, 0)
            sessions = list(rt._by_user.get(user, ()))
        cur = (user, epoch)
        pieces, later, gone = [], [], []
        try:
            self._package_sessions(user, epoch, cur, sessions, pieces, later, gone)
        except BaseException:
            for _, _, (tree, _, _) in later:
                tree.release()
            raise
        return pieces, later, gone, None

    def _package_sessions(self, user, epoch, cur, sessions, pieces, later, gone):
        for s in sessions:
            if s.ck_mark != cur or s.ck_dirty:
                if s.ck_mark is not None and s.ck_mark[0] != user:
                    gone.append(pb.CheckpointKey(user=s.ck_mark[0], conn=s.conn))
                s.ck_dirty = False
                cp = pb.ConnPackage(name=s.conn, user=s._user, values=s.values.encode())
                pieces.append(pb.CheckpointPiece(user=user, epoch=epoch, conn=s.conn, package=cp.SerializeToString()))
                s.ck_mark = cur
            for p in list(s.pages.values()):
                m = p.ck
                whole = self._take_full(user, s.conn, p.id)
                if m.mark == cur and not m.dirty and not whole:
                    continue
                if m.mark is not None and m.mark[0] != user:
                    gone.append(pb.CheckpointKey(user=m.mark[0], conn=s.conn, page=p.id))
                m.dirty = False
                seq, _, _ = p.coll.state()
                cp = pb.ConnPackage(name=s.conn, user=s._user)
                pp = cp.pages.add(id=p.id, kind=p.kind, schema=p.schema, seq=seq, floor=seq)
                pp.tables.extend(p.tables())
                for path, tables in p._marks.items():
                    pp.marks[path].tables.extend(tables)
                for mid, res in p.answered.items():
                    pp.answered.add(msg_id=mid).result.CopyFrom(res)
                inc = not whole and m.next_increment(cur)
                chain, link = m.chain, m.link + 1
                release = None
                if inc:
                    pp.journal.extend(m.log.deltas)
                elif p.tree.size >= CHAIN_MIN:
                    root = p.tree.view()
                    release = (p.tree, root, pp)
                    link = 0
                else:
                    pp.tree = p.tree.encode()
                    link = 0
                m.sent(cur, inc, p.tree.size)
                if not inc:
                    chain = m.chain
                piece = pb.CheckpointPiece(user=user, epoch=epoch, conn=s.conn, page=p.id, chain=chain, link=link)
                if release is not None:
                    later.append((piece, cp, release))
                    continue
                piece.package = cp.SerializeToString()
                pieces.append(piece)


def _encode_later(cp, release):
    tree, root, pp = release
    try:
        pp.tree = encode_value(root)
    finally:
        tree.release()
    return cp.SerializeToString()


def restore(page, seq, generation, notice):
    """Continues a page woken from a checkpoint: its sequence numbers jump
    above anything a client of an earlier incarnation was sent, and its
    first delta is a RESET of its tree carrying notice."""
    base = max(((seq >> 32) + 1) << 32, generation << 32)
    page.coll.restore(base, base, [])
    page.coll.restart_clean(notice)
    page.ck.restored_at = page.coll.last()
