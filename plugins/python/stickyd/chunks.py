"""Large packages and envelopes in pieces, as the Go SDK sends and reads
them (internal/channel/chunks.go; docs/protocol.md, "PackageChunk").

A package above CHUNK_BYTES goes as PackageChunk envelopes ahead of the
envelope it belongs to (same id and reply flag; part numbers the package
when the envelope carries several), and that envelope carries the rest (an
empty field). Any other envelope above CHUNK_BYTES goes as the pieces of its
own encoding (part ENVELOPE_PART, envelope set), handled once whole; a
notice (id 0) sent so is numbered with NOTICE_BIT set. A side splits only
towards one that said it reads chunks (Hello.package_chunks,
HelloAck.package_chunks), so a package of any size never travels as one
gRPC message, and other people's envelopes pass between its pieces.
"""

import itertools
import threading

from . import stickyd_pb2 as pb

CHUNK_BYTES = 256 << 10  # channel.ChunkBytes
MAX_ASSEMBLING = 4096  # packages arriving in chunks at once
MAX_BYTES = 512 << 20  # channel.MaxEnvelopeBytes: one package's or envelope's bound
ENVELOPE_PART = 0xFFFFFFFF
NOTICE_BIT = 1 << 63


class ChunkError(Exception):
    """Chunks the other side should never have sent: the channel ends."""


def package_fields(env):
    """The packages env carries, numbered by part: (message, field name)."""
    body = env.WhichOneof("body")
    if body == "frozen":
        return [(env.frozen, "package")]
    if body == "wake":
        return [(env.wake, "package"), (env.wake, "base_package")]
    if body == "precopied":
        return [(env.precopied, "package")]
    if body == "stage":
        return [(env.stage, "package")]
    if body == "checkpointed":
        return [(p, "package") for p in env.checkpointed.pieces]
    return []


_notices = itertools.count(1)
_notices_mu = threading.Lock()


def split(env):
    """The envelopes that carry env: its large packages' chunks, then env
    (those packages emptied: env is the sender's no longer), or the pieces
    of env's encoding when it is still large."""
    out = []
    if env.id:
        for part, (msg, field) in enumerate(package_fields(env)):
            data = getattr(msg, field)
            if len(data) <= CHUNK_BYTES:
                continue
            out.extend(_chunks(env.id, env.reply, part, False, data))
            setattr(msg, field, b"")
    if env.ByteSize() <= CHUNK_BYTES:
        out.append(env)
        return out
    id = env.id
    if not id:
        with _notices_mu:
            id = NOTICE_BIT | next(_notices)
    out.extend(_chunks(id, env.reply, ENVELOPE_PART, True, env.SerializeToString()))
    return out


def _chunks(id, reply, part, envelope, data):
    view = memoryview(data)
    for off in range(0, len(data), CHUNK_BYTES):
        pc = pb.PackageChunk(data=bytes(view[off:off + CHUNK_BYTES]), part=part, envelope=envelope)
        if off == 0:
            pc.total = len(data)
        yield pb.Envelope(id=id, reply=reply, package_chunk=pc)


class _Assembly:
    __slots__ = ("buf", "total", "envelope")

    def __init__(self, total, envelope):
        self.buf = bytearray()
        self.total = total
        self.envelope = envelope


class Assembler:
    """Puts what arrives in chunks back together; used by the channel's
    reader alone, in arrival order."""

    def __init__(self):
        self._assembling = {}  # (id, reply, part) -> _Assembly

    def take(self, env):
        """The envelope to handle for env: env itself with its packages
        whole, an envelope whose last piece env was, or None (a chunk kept).
        Raises ChunkError for chunks that break the rules."""
        if env.WhichOneof("body") == "package_chunk":
            env = self._gather(env, env.package_chunk)
            if env is None:
                return None
        if not self._assembling:
            return env
        for part, (msg, field) in enumerate(package_fields(env)):
            a = self._assembling.get((env.id, env.reply, part))
            if a is None or a.envelope:
                continue
            del self._assembling[(env.id, env.reply, part)]
            a.buf += getattr(msg, field)
            setattr(msg, field, bytes(a.buf))
        for (id, reply, part), a in self._assembling.items():
            if id == env.id and reply == env.reply and not a.envelope:
                raise ChunkError("package chunks arrived for a %s envelope, which carries no package %d"
                                 % (env.WhichOneof("body"), part))
        return env

    def _gather(self, env, pc):
        key = (env.id, env.reply, pc.part)
        a = self._assembling.get(key)
        if a is None:
            if pc.total > MAX_BYTES:
                raise ChunkError("a package of %d bytes arrived in chunks; at most %d are accepted" % (pc.total, MAX_BYTES))
            if len(self._assembling) >= MAX_ASSEMBLING:
                raise ChunkError("%d packages are arriving in chunks at once; at most %d may"
                                 % (len(self._assembling) + 1, MAX_ASSEMBLING))
            a = self._assembling[key] = _Assembly(pc.total, pc.envelope)
        if pc.envelope != (pc.part == ENVELOPE_PART):
            raise ChunkError("a chunk of part %d says envelope=%s" % (pc.part, pc.envelope))
        if len(a.buf) + len(pc.data) > MAX_BYTES:
            raise ChunkError("a package arriving in chunks passed %d bytes" % MAX_BYTES)
        a.buf += pc.data
        if not a.envelope:
            return None
        if len(a.buf) > a.total:
            raise ChunkError("an envelope sent in pieces passed its %d bytes" % a.total)
        if len(a.buf) < a.total:
            return None
        del self._assembling[key]
        out = pb.Envelope()
        try:
            out.ParseFromString(bytes(a.buf))
        except Exception as e:
            raise ChunkError("decoding an envelope sent in pieces: %s" % e)
        if out.WhichOneof("body") == "package_chunk":
            raise ChunkError("an envelope sent in pieces is itself a piece")
        if env.id & NOTICE_BIT:
            out.id = 0
        return out
