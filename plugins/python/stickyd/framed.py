"""The framed channel (docs/protocol.md), as the Go SDK offers it
(internal/channel/framed.go): the same envelopes as the gRPC stream, each
as a 4-byte big-endian length and its protobuf encoding, on a Unix socket
of the worker's.

go-plugin still launches the worker, checks its handshake and health, and
carries the channel's own handshake on the gRPC stream; the worker offers
its socket in its Hello (path and a one-time token, both only ever sent
over that stream), the host dials it and proves itself with the token, and
says so in its HelloAck. From then on the envelopes go on the socket: no
HTTP/2 frames, and one writer thread that writes whatever the senders
queued since its last write in one write.
"""

import hmac
import os
import shutil
import socket
import tempfile
import threading
import time

from . import stickyd_pb2 as pb

TOKEN_BYTES = 32
TOKEN_WAIT = 2.0  # a connection to the socket has this long to send the token
OFFER_WAIT = 10.0  # the host's dial, once it said it dialed
MAX_ENVELOPE = 512 << 20  # channel.MaxEnvelopeBytes
QUEUE_BYTES = 4 << 20  # what waits for the writer before senders wait
MAX_SOCKET_DIR = 64  # the longest temporary directory the socket is made in
READ_BUFFER = 64 << 10


class FramedError(Exception):
    """The framed channel could not be taken or broke its rules."""


class Offer:
    """The worker's socket, offered in its Hello."""

    def __init__(self):
        # A Unix socket's path is bounded (108 bytes on Linux): a long
        # TMPDIR (a Nomad allocation's) gives way to /tmp.
        base = tempfile.gettempdir()
        if len(base) > MAX_SOCKET_DIR:
            base = "/tmp"
        self._dir = tempfile.mkdtemp(prefix="stickyd-channel-", dir=base)  # mode 0700
        self.path = os.path.join(self._dir, "s")
        self._ln = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._ln.bind(self.path)
            self._ln.listen(8)
        except OSError:
            self.close()
            raise
        self._token = os.urandom(TOKEN_BYTES)

    def fill(self, hello):
        hello.framed_socket, hello.framed_token = self.path, self._token.hex()

    def take(self):
        """The first connection that proves itself with the token (a
        stranger's is closed and the socket stays for the host); the socket
        and its directory are gone once it returns."""
        try:
            deadline = time.monotonic() + OFFER_WAIT
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise FramedError("the host did not come to the framed channel within %gs" % OFFER_WAIT)
                self._ln.settimeout(left)
                try:
                    nc, _ = self._ln.accept()
                except socket.timeout:
                    continue
                nc.settimeout(TOKEN_WAIT)
                got = b""
                try:
                    while len(got) < TOKEN_BYTES:
                        b = nc.recv(TOKEN_BYTES - len(got))
                        if not b:
                            break
                        got += b
                except OSError:
                    pass
                if not hmac.compare_digest(got, self._token):
                    nc.close()  # not the host
                    continue
                nc.settimeout(None)
                return Conn(nc)
        finally:
            self.close()

    def close(self):
        try:
            self._ln.close()
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)


class Conn:
    """One framed channel: send from any thread, recv from one."""

    def __init__(self, sock):
        self._sock = sock
        self._rfile = sock.makefile("rb", buffering=READ_BUFFER)
        self._cv = threading.Condition()
        self._queue = []
        self._queued = 0
        self._closed = False
        self._writer = threading.Thread(target=self._write_loop, name="stickyd-framed-writer", daemon=True)
        self._writer.start()

    def send(self, env):
        data = env.SerializeToString()
        if len(data) > MAX_ENVELOPE:
            raise FramedError("an envelope of %d bytes; at most %d go on the channel" % (len(data), MAX_ENVELOPE))
        frame = len(data).to_bytes(4, "big") + data
        with self._cv:
            while self._queued > QUEUE_BYTES and not self._closed:
                self._cv.wait()
            if self._closed:
                return
            self._queue.append(frame)
            self._queued += len(frame)
            self._cv.notify_all()

    def _write_loop(self):
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                frames, self._queue, self._queued = self._queue, [], 0
                self._cv.notify_all()
            try:
                # What queued since the last write goes in one write.
                self._sock.sendall(frames[0] if len(frames) == 1 else b"".join(frames))
            except OSError:
                self.close()
                return

    def recv(self):
        """The next envelope; None when the host closed the channel.
        Raises FramedError for a frame that breaks the rules."""
        head = self._rfile.read(4)
        if len(head) < 4:
            return None
        n = int.from_bytes(head, "big")
        if n > MAX_ENVELOPE:
            raise FramedError("the host framed an envelope of %d bytes; at most %d are read" % (n, MAX_ENVELOPE))
        data = self._rfile.read(n)
        if len(data) < n:
            return None
        env = pb.Envelope()
        try:
            env.ParseFromString(data)
        except Exception as e:
            raise FramedError("decoding a framed envelope: %s" % e)
        return env

    def close(self):
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._cv.notify_all()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
