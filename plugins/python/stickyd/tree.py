"""The page tree and its codec: the same data, paths, deltas and binary
form as the Go SDK (plugins/worker/tree.go and codec.go), so a person's
pages can move between a Python worker and any other.

A tree holds JSON-like values only (None, bool, int, float, str, list,
dict with str keys): it is serialisable by construction. Paths name a value
by its keys separated by "/" ("grid/filter/text"); a numeric segment indexes
a list; the empty path is the root, a dict. Every write to a page's tree
becomes a delta the page pulls.

A tree is used only from its person's mailbox, one frame at a time: it is
not safe for concurrent use, and what get() returns must be treated as
read-only (write it back with set()).
"""

import json
import math
import struct
import threading

SET, DELETE = 0, 1

# Guards every tree's count of views (taken in a mailbox, released by the
# thread that encoded them).
_views_mu = threading.Lock()


class BadPath(ValueError):
    """A path that does not name a place in the tree."""


class NotData(TypeError):
    """A value that is not JSON-like data (keep live objects in page.local)."""


def normalize(v, depth=0):
    """Deep-copies v into JSON-like values; refuses anything else."""
    if depth > 512:
        raise NotData("a tree value nests deeper than 512 levels")
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            raise NotData("%r is not a JSON number" % v)
        return v
    if isinstance(v, dict):
        out = {}
        for k, e in v.items():
            if not isinstance(k, str):
                raise NotData("a tree map key must be a str, not %s" % type(k).__name__)
            out[k] = normalize(e, depth + 1)
        return out
    if isinstance(v, (list, tuple)):
        return [normalize(e, depth + 1) for e in v]
    raise NotData("a %s is not serialisable data: keep live objects in page.local" % type(v).__name__)


def dumps(v):
    """The JSON of a tree value, as deltas carry it."""
    return json.dumps(v, separators=(",", ":"), sort_keys=True, ensure_ascii=False).encode("utf-8")


class StateTooLarge(Exception):
    """A write that would take a page's state, or its person's pages, past
    its bound (the group's max_page_bytes, max_person_bytes); the Go SDK's
    ErrStateTooLarge."""


class Tree:
    """A page's data (or a connection's values): see the module doc."""

    def __init__(self, emit=None, room=None):
        self._root = {}
        # emit(op, path, value_json_bytes_or_None) is called for every write.
        self._emit = emit
        # room(delta), when set, is asked before a write that changes the
        # tree's size by delta bytes; it raises StateTooLarge to refuse it.
        self._room = room
        # size is the tree's size as its JSON (dumps) writes it, kept as it
        # is written: the bounds of a page's state read it.
        self.size = 2
        # While views are held (view()), the containers that existed when
        # the last was taken are shared with them: a write copies the
        # containers on its path first, unless they are in _fresh (made
        # since, by id: each is alive while it is in the tree, and an id
        # reused later is a new object's, never a shared one's).
        self._views = 0
        self._fresh = None

    def view(self):
        """The root as it is now, unchanged by later writes until release()
        (copy-on-write: a write copies the dicts and lists on its path). It
        may be read from another thread while the tree is written: a
        precopy or a checkpoint encodes it outside the person's mailbox.
        Taken where the tree is written (its person's mailbox)."""
        with _views_mu:
            self._views += 1
        self._fresh = set()
        return self._root

    def release(self):
        """Ends a view taken by view(); from any thread."""
        with _views_mu:
            self._views -= 1

    def _own(self, c):
        """c, or its copy when a view shares it: the container a write may
        change in place. _fresh is only touched where the tree is written."""
        fresh = self._fresh
        if fresh is None:
            return c
        if not self._views:
            self._fresh = None  # the last view went
            return c
        if id(c) in fresh:
            return c
        c = dict(c) if isinstance(c, dict) else list(c)
        fresh.add(id(c))
        return c

    def get(self, path="", default=None):
        """The value at path, or default when there is none."""
        if path == "":
            return self._root
        cur = self._root
        for seg in path.split("/"):
            if isinstance(cur, dict):
                if seg not in cur:
                    return default
                cur = cur[seg]
            elif isinstance(cur, list):
                i = _index(seg)
                if i is None or i >= len(cur):
                    return default
                cur = cur[i]
            else:
                return default
        return default if cur is None else cur

    def number(self, path):
        """The number at path, or 0."""
        v = self.get(path)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return 0
        return v

    def string(self, path):
        """The str at path, or ""."""
        v = self.get(path)
        return v if isinstance(v, str) else ""

    def set(self, path, value):
        """Stores a copy of value at path, creating the dicts on the way.
        Setting the root replaces the whole tree and requires a dict."""
        nv = normalize(value)
        enc = dumps(nv)
        if path == "":
            if not isinstance(nv, dict):
                raise BadPath("setting the root: the root must be a dict")
            delta = len(enc) - self.size
            self._ask(delta)
            self._root = nv
        else:
            delta = len(enc) - self._weight(path)
            self._ask(delta)
            self._place(path, nv, False)
        self.size += delta
        if self._emit is not None:
            self._emit(SET, path, enc)

    def delete(self, path):
        """Removes the value at path; deleting what is not there is a no-op
        that produces no delta."""
        if path == "":
            return
        parent, _, last = path.rpartition("/")
        holder = self.get(parent) if parent else self._root
        if isinstance(holder, dict):
            if last not in holder:
                return
        elif self.get(path) is None:
            return
        delta = -self._weight(path)
        try:
            self._place(path, None, True)
        except BadPath:
            return
        self.size += delta
        if self._emit is not None:
            self._emit(DELETE, path, None)

    def _weight(self, path):
        """What the value at path adds to the tree's JSON: its own, and, in
        a dict, its key, colon and comma (0 when there is none)."""
        old = self.get(path)
        if old is None:
            return 0
        key = path.rpartition("/")[2]
        return len(dumps(old)) + len(dumps(key)) + 2

    def _ask(self, delta):
        if self._room is not None and delta > 0:
            self._room(delta)

    def _place(self, path, v, delete):
        segs = path.split("/")
        cur = self._root = self._own(self._root)
        for i, seg in enumerate(segs):
            last = i == len(segs) - 1
            if isinstance(cur, dict):
                if last:
                    if delete:
                        cur.pop(seg, None)
                    else:
                        cur[seg] = v
                    return
                nxt = cur.get(seg)
                if nxt is None:
                    if delete:
                        return
                    nxt = {}
                elif isinstance(nxt, (dict, list)):
                    nxt = self._own(nxt)
                cur[seg] = nxt
                cur = nxt
            elif isinstance(cur, list):
                idx = _index(seg)
                if idx is None or idx >= len(cur):
                    raise BadPath("%r: index %r out of range" % (path, seg))
                if last:
                    if delete:
                        raise BadPath("%r: cannot delete a list element, set the list" % path)
                    cur[idx] = v
                    return
                nxt = cur[idx]
                if isinstance(nxt, (dict, list)):
                    nxt = cur[idx] = self._own(nxt)
                cur = nxt
            else:
                raise BadPath("%r: %r is not a dict or a list" % (path, "/".join(segs[:i])))

    def replay(self, deltas):
        """Applies a journal of writes (pb.Delta SET and DELETE, values in
        JSON) without deltas or bounds: a page woken from a precopy or a
        checkpoint chain, brought to where its person left it."""
        for d in deltas:
            if d.op == 0:  # SET
                try:
                    v = normalize(json.loads(d.value))
                except (ValueError, TypeError) as e:
                    raise ValueError("replaying %r: %s" % (d.path, e))
                if d.path == "":
                    if not isinstance(v, dict):
                        raise BadPath("replaying the root: not a map")
                    self._root = v
                    self.size = len(dumps(v))
                    continue
                delta = len(dumps(v)) - self._weight(d.path)
                self._place(d.path, v, False)
                self.size += delta
            elif d.op == 1:  # DELETE
                delta = -self._weight(d.path)
                self._place(d.path, None, True)
                self.size += delta
            else:
                raise ValueError("replaying %r: a journal holds no op %d" % (d.path, d.op))

    def snapshot(self):
        """The JSON of the whole tree (a RESET delta's value)."""
        return dumps(self._root)

    def encode(self):
        """The tree in the SDKs' binary codec, as packages carry it."""
        return encode_value(self._root)

    def load(self, data):
        """Replaces the content with an encoded root, without deltas."""
        if not data:
            self._root = {}
            self.size = 2
            return
        v, rest = _decode(memoryview(data), 0)
        if len(rest):
            raise ValueError("damaged tree encoding: %d trailing bytes" % len(rest))
        if not isinstance(v, dict):
            raise ValueError("damaged tree encoding: the root is not a map")
        self._root = v
        self.size = len(dumps(v))


def _index(seg):
    if not seg.isdigit() or not seg.isascii():
        return None
    return int(seg)


# The codec (plugins/worker/codec.go): one type byte, then
#   'n' None  't' True  'f' False
#   'd' float64, 8 bytes little-endian (ints travel as float64, like JSON)
#   's' str: uvarint length, UTF-8 bytes
#   'a' list: uvarint count, values
#   'm' dict: uvarint count, then per entry a uvarint key length, key, value

_F64 = struct.Struct("<d")
_MAX_DEPTH = 512
_EXACT = 1 << 53


def _uvarint(n, out):
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _text(s):
    return s.encode("utf-8", "surrogateescape")


def encode_value(v):
    out = bytearray()
    _encode(v, out)
    return bytes(out)


def _encode(v, out):
    if v is None:
        out.append(0x6E)  # n
    elif v is True:
        out.append(0x74)  # t
    elif v is False:
        out.append(0x66)  # f
    elif isinstance(v, (int, float)):
        out.append(0x64)  # d
        out += _F64.pack(float(v))
    elif isinstance(v, str):
        b = _text(v)
        out.append(0x73)  # s
        _uvarint(len(b), out)
        out += b
    elif isinstance(v, list):
        out.append(0x61)  # a
        _uvarint(len(v), out)
        for e in v:
            _encode(e, out)
    elif isinstance(v, dict):
        out.append(0x6D)  # m
        _uvarint(len(v), out)
        for k, e in v.items():
            b = _text(k)
            _uvarint(len(b), out)
            out += b
            _encode(e, out)
    else:
        raise NotData("encoding a tree: %s is not a tree value" % type(v).__name__)


def _len(b):
    n, shift, i = 0, 0, 0
    while True:
        if i >= len(b) or i >= 10:
            raise ValueError("damaged tree encoding")
        c = b[i]
        n |= (c & 0x7F) << shift
        i += 1
        if c < 0x80:
            break
        shift += 7
    if n > len(b) - i:
        raise ValueError("damaged tree encoding")
    return n, b[i:]


def _decode(b, depth):
    if not len(b) or depth > _MAX_DEPTH:
        raise ValueError("damaged tree encoding")
    tag, b = b[0], b[1:]
    if tag == 0x6E:
        return None, b
    if tag == 0x74:
        return True, b
    if tag == 0x66:
        return False, b
    if tag == 0x64:
        if len(b) < 8:
            raise ValueError("damaged tree encoding")
        x = _F64.unpack(b[:8])[0]
        if x.is_integer() and -_EXACT <= x <= _EXACT:
            x = int(x)  # what a Python app wrote as an int comes back one
        return x, b[8:]
    if tag == 0x73:
        n, rest = _len(b)
        return bytes(rest[:n]).decode("utf-8", "surrogateescape"), rest[n:]
    if tag == 0x61:
        n, rest = _len(b)  # every element takes a byte: n is bounded
        out = []
        for _ in range(n):
            v, rest = _decode(rest, depth + 1)
            out.append(v)
        return out, rest
    if tag == 0x6D:
        n, rest = _len(b)
        out = {}
        for _ in range(n):
            kl, rest = _len(rest)
            k = bytes(rest[:kl]).decode("utf-8", "surrogateescape")
            out[k], rest = _decode(rest[kl:], depth + 1)
        return out, rest
    raise ValueError("damaged tree encoding: unknown tag %r" % chr(tag))
