"""Precopy (docs/moves.md), as the Go SDK does it (plugins/worker/precopy.go).

Ahead of a move, the host asks for a copy of a person's state without
freezing them. In the person's mailbox, between two of their frames, each
page's tree gives a view that stays as it is while the person goes on
(Tree.view: a write then copies the containers on its path), and each page
starts a journal of its writes; the views are encoded on a thread of their
own. The host stages the copy at the destination, which reads it while the
person is still at home. The freeze that follows (Freeze.base) hands over
each page as its journal, and the wake replays the journal on the staged
copy: the pause is what the person wrote during the move, not the size of
their state.
"""

import random
import threading
import time

from . import stickyd_pb2 as pb
from .tree import Tree, encode_value

PACKAGE_FORMAT = 1  # runtime.PACKAGE_FORMAT

# The smallest person worth a precopy: below it a full freeze costs less
# than the extra round trip.
PRECOPY_MIN = 256 << 10
# One page's journal in bytes: a page written more than that since the
# precopy is frozen whole.
JOURNAL_MAX = 16 << 20
# How long a precopy waits for its freeze: a move that never came stops
# the journal.
PRECOPY_TTL = 120.0

# The staged copies at a destination (a cache: a wake whose base is gone is
# sent again with it).
STAGED_MAX = 64
STAGED_BYTES = 1 << 30
STAGED_TTL = 120.0


class NotStaged(Exception):
    """A wake whose base is neither staged here nor sent with it: answered
    NOT_FOUND, and the host sends it again with Wake.base_package."""


class Journal:
    """A page's writes since a precopy, up to JOURNAL_MAX bytes: past them
    it breaks (and lets its writes go), and the page goes whole. Written in
    the person's mailbox."""

    __slots__ = ("deltas", "bytes", "broken", "base", "at", "pending")

    def __init__(self, base, pending):
        self.deltas = []
        self.bytes = 0
        self.broken = False
        self.base = base
        self.at = time.monotonic()
        # The page's pending deltas the precopy holds, by identity (held
        # here, so their ids stay theirs): those still pending at the
        # freeze go by their sequence alone.
        self.pending = {id(d): d for d in pending}

    def note(self, op, path, value):
        if self.broken:
            return
        self.bytes += len(path) + len(value or b"") + 16
        if self.bytes > JOURNAL_MAX:
            self.broken, self.deltas = True, []
            return
        d = pb.Delta(op=op, path=path)
        if value is not None:
            d.value = value
        self.deltas.append(d)

    def expired(self):
        return time.monotonic() - self.at > PRECOPY_TTL


def person_size(rt, user):
    """The person's state here, roughly (their pages' trees as JSON): the
    channel's reader answers a precopy of a small person from it without a
    turn of their mailbox."""
    with rt._mu:
        sessions = list(rt._by_user.get(user, ()))
    return sum(p.tree.size for s in sessions for p in list(s.pages.values()))


def _small(rt, id):
    rt._reply(id, precopied=pb.Precopied(small=True))


def precopy(rt, id, pc):
    """Answers a Precopy in the person's mailbox: takes the views and starts
    the journals, then encodes on a thread of its own."""
    with rt._mu:
        if pc.user in rt._frozen:
            _small(rt, id)  # frozen already: the move's freeze finds nothing to add
            return
        sessions = list(rt._by_user.get(pc.user, ()))
        epoch = rt._epochs.get(pc.user, 0)
    if not sessions:
        _small(rt, id)
        return
    base = random.getrandbits(64) | 1
    pkg = pb.UserPackage(format=PACKAGE_FORMAT, user=pc.user, epoch=epoch, app=rt.name,
                         app_version=rt.version, precopy=base)
    views = []
    for s in sessions:
        cp = pkg.conns.add(name=s.conn, user=s._user)
        for p in s.pages.values():
            root = p.tree.view()
            _, _, pending = p.coll.state()
            p.journal = Journal(base, pending)
            pp = cp.pages.add(id=p.id, kind=p.kind, schema=p.schema)
            pp.pending.extend(pending)
            views.append((p.tree, pp, root))

    def encode():
        try:
            for _, pp, root in views:
                pp.tree = encode_value(root)
        except Exception as e:
            rt._reply_error(id, pb.Error.INTERNAL, "encoding the precopy of %r: %s" % (pc.user, e))
            return
        finally:
            for t, _, _ in views:
                t.release()
        b = pkg.SerializeToString()
        if len(b) < PRECOPY_MIN:
            _small(rt, id)
            return
        rt._reply(id, precopied=pb.Precopied(package=b, base=base, pages=len(views)))

    threading.Thread(target=encode, name="stickyd-precopy", daemon=True).start()


def from_base(page, pp, base, pending):
    """Fills pp's pending deltas from pending (the page's, as the collector
    holds them) and makes pp the page's journal since the precopy base if it
    can: then the deltas the precopy holds go by their sequence alone. Ends
    the journal either way."""
    j = page.journal
    page.journal = None
    if not base or j is None or j.base != base or j.broken or j.expired():
        pp.pending.extend(pending)
        return False
    pp.from_base = True
    pp.journal.extend(j.deltas)
    for d in pending:
        if j.pending.get(id(d)) is d:
            pp.base_pending.append(d.seq)
        else:
            pp.pending.append(d)
    return True


class _StagedPage:
    __slots__ = ("root", "size", "pending")

    def __init__(self, root, size, pending):
        self.root, self.size, self.pending = root, size, pending


class _Staged:
    __slots__ = ("user", "at", "size", "pages")

    def __init__(self, user, size, pages):
        self.user, self.at, self.size, self.pages = user, time.monotonic(), size, pages


def _read_base(pkg):
    pages = {}
    for cp in pkg.conns:
        for pp in cp.pages:
            t = Tree()
            try:
                t.load(pp.tree)
            except ValueError as e:
                raise ValueError("reading page %r: %s" % (pp.id, e))
            pages[(cp.name, pp.id)] = _StagedPage(t.get(""), t.size, {d.seq: d for d in pp.pending})
    return pages


class Staging:
    """The precopies staged at this worker, by digest."""

    def __init__(self, package_format):
        self._format = package_format
        self._mu = threading.Lock()
        self._m = {}
        self._bytes = 0

    def stage(self, st):
        """Reads a precopy for a wake to come; runs off the channel's
        reader. Raises ValueError for a package it cannot read."""
        pkg = pb.UserPackage()
        try:
            pkg.ParseFromString(st.package)
        except Exception as e:
            raise ValueError("decoding the precopy of %r: %s" % (st.user, e))
        if pkg.format != self._format or not pkg.precopy:
            raise ValueError("staging %r: the package is not a precopy this SDK reads" % st.user)
        c = _Staged(st.user, len(st.package), _read_base(pkg))
        with self._mu:
            old = self._m.get(st.digest)
            if old is not None:
                self._bytes -= old.size
            self._m[st.digest] = c
            self._bytes += c.size
            # The oldest go first past the bounds (and past their time): a
            # wake whose copy went is sent again with it.
            while len(self._m) > STAGED_MAX or self._bytes > STAGED_BYTES:
                oldest = min(self._m, key=lambda d: self._m[d].at)
                self._bytes -= self._m.pop(oldest).size
            now = time.monotonic()
            for d in [d for d, e in self._m.items() if now - e.at > STAGED_TTL]:
                self._bytes -= self._m.pop(d).size

    def take(self, w, digest):
        """The precopy a woken package continues: the one sent with the
        wake, or the one staged here (taken: a copy serves one wake)."""
        if w.base_package:
            pkg = pb.UserPackage()
            try:
                pkg.ParseFromString(w.base_package)
            except Exception as e:
                raise ValueError("decoding the precopy of %r: %s" % (w.user, e))
            return _read_base(pkg)
        with self._mu:
            c = self._m.get(digest)
            if c is None or c.user != w.user:
                raise NotStaged("waking %r from %s: the precopy this package continues is not staged here"
                                % (w.user, digest))
            del self._m[digest]
            self._bytes -= c.size
        return c.pages

    def __len__(self):
        with self._mu:
            return len(self._m)


def load_page(tree, conn, pp, base):
    """Fills a woken page's tree: from its package, or from the precopy it
    continues with its journal replayed. Sets pp's pending to the page's
    deltas in order (the base's it names and its own)."""
    if not pp.from_base:
        tree.load(pp.tree)
        # A checkpoint's page: its increments' writes since, replayed.
        tree.replay(pp.journal)
        return
    if base is None:
        raise ValueError("the page continues a precopy the package does not name")
    sp = base.pop((conn, pp.id), None)
    if sp is None:
        raise ValueError("the page is not in the precopy it continues")
    if pp.base_pending:
        deltas = []
        for seq in pp.base_pending:
            d = sp.pending.get(seq)
            if d is None:
                raise ValueError("the precopy it continues has no pending delta %d" % seq)
            deltas.append(d)
        deltas.extend(pp.pending)
        deltas.sort(key=lambda d: d.seq)
        del pp.pending[:]
        pp.pending.extend(deltas)
    tree._root, tree.size = sp.root, sp.size
    tree.replay(pp.journal)
