"""The go-plugin glue: what a stickyd host (internal/host.PluginLauncher,
hashicorp/go-plugin with AllowedProtocols grpc) needs from a worker
process, in Python.

1. The magic cookie: the host sets STICKYD_WORKER_PLUGIN; run by hand, the
   worker explains itself and exits.
2. A gRPC server on 127.0.0.1 and one line on stdout,
   CORE|APP|NETWORK|ADDRESS|PROTOCOL = "1|1|tcp|127.0.0.1:PORT|grpc": core
   protocol 1 is go-plugin's; app protocol 1 is the host's
   channel.Handshake.ProtocolVersion (it must be among the versions the host
   offers in PLUGIN_PROTOCOL_VERSIONS).
   With go-plugin's AutoMTLS (the host's default) the host passes its
   one-time certificate in PLUGIN_CLIENT_CERT: the worker makes one of its
   own, serves mutual TLS that takes only the host's, and adds its
   certificate (DER, base64 without padding) as a sixth field.
3. The services the host calls: grpc.health.v1.Health/Check ("plugin" is
   SERVING), plugin.GRPCController/Shutdown, and stickyd's
   stickyd.channel.v1.Worker/Channel, the one stream of Envelopes. The
   broker and stdio services go-plugin also tries are absent: the host
   tolerates that (Unimplemented).

The process ends with its channel: when the host closes it, says Shutdown,
or calls the controller's Shutdown, or when the host process is gone. stdin
is not watched: go-plugin gives the worker the host's own stdin (often
/dev/null), not a pipe it closes.
"""

import base64
import datetime
import json
import os
import queue
import signal
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc

from . import stickyd_pb2 as pb
from . import framed
from .chunks import Assembler, ChunkError, split

MAGIC_COOKIE_KEY = "STICKYD_WORKER_PLUGIN"
MAGIC_COOKIE_VALUE = "3f1c0b1e-stickyd-worker"
CORE_PROTOCOL = 1
APP_PROTOCOL = 1
PROTOCOL_VERSION = 1  # internal/protocol.Version: the channel's
MAX_ENVELOPE = 512 << 20  # channel.MaxEnvelopeBytes
# CHANNEL_ENV set to "grpc" keeps every envelope on the gRPC stream (no
# framed channel is offered), as for the Go SDK.
CHANNEL_ENV = "STICKYD_WORKER_CHANNEL"

# grpc.health.v1 by hand: HealthCheckRequest{string service = 1} and
# HealthCheckResponse{ServingStatus status = 1}, SERVING = 1.
_SERVING = b"\x08\x01"


def _health_service(raw):
    """The service name of an encoded HealthCheckRequest ("" when absent)."""
    if len(raw) >= 2 and raw[0] == 0x0A:
        n, i, shift = 0, 1, 0
        while i < len(raw):
            c = raw[i]
            n |= (c & 0x7F) << shift
            i += 1
            if c < 0x80:
                break
            shift += 7
        return bytes(raw[i:i + n]).decode("utf-8", "replace")
    return ""


class Log:
    """hclog's JSON lines on stderr: go-plugin turns each into a host log
    line of the same level."""

    def __init__(self):
        self._mu = threading.Lock()  # one line at a time

    def _write(self, level, msg, kv):
        entry = {"@level": level, "@message": msg,
                 "@timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"}
        entry.update(kv)
        line = json.dumps(entry, default=str)
        with self._mu:
            sys.__stderr__.write(line + "\n")
            sys.__stderr__.flush()

    def debug(self, msg, **kv):
        self._write("debug", msg, kv)

    def info(self, msg, **kv):
        self._write("info", msg, kv)

    def warn(self, msg, **kv):
        self._write("warn", msg, kv)

    def error(self, msg, **kv):
        self._write("error", msg, kv)


class _Channel:
    """The one Channel stream: Hello first, the HelloAck, then every
    envelope to the runtime in arrival order. Sends from any thread go
    through a queue that the stream's response iterator drains."""

    def __init__(self, make_runtime, hello, log, done):
        self._make_runtime = make_runtime
        self._hello = hello
        self._log = log
        self._done = done
        self._out = queue.Queue()
        self._used = threading.Lock()
        self._closed = threading.Event()
        # Whether the host reads packages in chunks (HelloAck): then large
        # ones are sent so (chunks.py).
        self._split = False
        # The framed channel offered in the Hello, and taken when the host
        # says it dialed it (framed.py): then every envelope goes on it.
        self._offer = None
        self._framed = None

    def send(self, env):
        if self._closed.is_set():
            return
        put = self._out.put if self._framed is None else self._framed.send
        if not self._split:
            put(env)
            return
        # One sender's pieces in order; another's may pass between them.
        for e in split(env):
            put(e)

    def close(self):
        if not self._closed.is_set():
            self._closed.set()
            self._out.put(None)
            if self._framed is not None:
                self._framed.close()

    def serve(self, requests, context):
        if not self._used.acquire(blocking=False):
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "this worker already has its channel")
        context.add_callback(self._done.set)
        hello = pb.Hello()
        hello.CopyFrom(self._hello)
        if os.environ.get(CHANNEL_ENV) != "grpc":
            try:
                self._offer = framed.Offer()
                self._offer.fill(hello)
            except OSError as e:
                self._log.warn("the framed channel is not offered; envelopes go on the gRPC stream", error=str(e))
                self._offer = None
        self._out.put(pb.Envelope(id=1, hello=hello))
        threading.Thread(target=self._read, args=(requests,), name="stickyd-channel-reader", daemon=True).start()
        while True:
            env = self._out.get()
            if env is None:
                return
            yield env

    def _read(self, requests):
        rt = None
        try:
            first = next(requests)
            if first.WhichOneof("body") == "error":
                self._log.error("the host refused this worker", message=first.error.message)
                return
            if first.WhichOneof("body") != "hello_ack":
                self._log.error("the host answered hello with %s" % first.WhichOneof("body"))
                return
            ack = first.hello_ack
            incoming = requests
            if self._offer is not None:
                offer, self._offer = self._offer, None
                if ack.framed:
                    self._framed = offer.take()
                    incoming = self._framed_envelopes(requests)
                else:
                    offer.close()
            self._split = ack.package_chunks
            rt = self._make_runtime(self.send, self.close)
            rt.worker_id = ack.worker_id
            rt.batches = ack.batches
            if ack.HasField("limits"):
                rt.set_limits(ack.limits)
            self._log.info("worker ready", worker=rt.worker_id, group=ack.group,
                           channel="framed" if self._framed is not None else "grpc")
            pieces = Assembler()
            for env in incoming:
                if env.batch:
                    # Envelopes sent together (Hello.batches): each as if
                    # it had come alone, in order.
                    if env.WhichOneof("body") or env.id:
                        raise ChunkError("a batch's carrier has a body or an id of its own")
                    for member in env.batch:
                        if member.batch or member.WhichOneof("body") == "package_chunk":
                            raise ChunkError("a batch holds a batch or a piece of a package")
                        rt.handle(member)
                    continue
                env = pieces.take(env)
                if env is not None:
                    rt.handle(env)
        except grpc.RpcError:
            pass  # the host closed the stream
        except StopIteration:
            pass
        except (ChunkError, framed.FramedError) as e:
            self._log.error("the channel broke its rules or could not be taken; ending it", error=str(e))
        except Exception as e:  # a bug here ends the worker: say why
            self._log.error("channel reader failed", error=repr(e))
        finally:
            if self._offer is not None:
                self._offer.close()
            if rt is not None:
                rt.close()
            self.close()
            self._done.set()

    def _framed_envelopes(self, requests):
        """The envelopes of the framed channel, until it ends or the gRPC
        stream beside it does (the worker stops when either ends)."""
        fc = self._framed

        def watch():
            try:
                for _ in requests:
                    pass  # nothing comes here once framed
            except grpc.RpcError:
                pass
            fc.close()

        threading.Thread(target=watch, name="stickyd-stream-watch", daemon=True).start()
        while True:
            env = fc.recv()
            if env is None:
                return
            yield env


def _alive(pid):
    """Whether process pid exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_host():
    """Exits, saying why, unless a go-plugin host that speaks this worker's
    plugin protocol started the process."""
    if os.environ.get(MAGIC_COOKIE_KEY) != MAGIC_COOKIE_VALUE:
        sys.stderr.write("This is a stickyd worker: a stickyd host starts it (a group with runtime python3).\n"
                         "It is not meant to be run by hand.\n")
        sys.exit(1)
    offered = [v.strip() for v in os.environ.get("PLUGIN_PROTOCOL_VERSIONS", str(APP_PROTOCOL)).split(",")]
    if str(APP_PROTOCOL) not in offered:
        sys.stderr.write("the host offers plugin protocols %s; this worker speaks %d\n" % (",".join(offered), APP_PROTOCOL))
        sys.exit(1)


def prepare():
    """Readies what a worker's start needs besides the app (AutoMTLS's
    cryptography): a template calls it before it forks, so each fork only
    makes its own key and certificate."""
    try:
        import cryptography  # noqa: F401
    except ImportError:
        return  # said by the worker's start, with what to do
    # One certificate made and dropped: the library's first one costs
    # about 50 ms (its backend's start), a fork's then about 15.
    _one_time_cert()


def _one_time_cert():
    """A P-256 key and a self-signed certificate for this process's life,
    as go-plugin makes for AutoMTLS: named localhost, for both ends of TLS
    (the host takes it as its only root). Returns the key and certificate in
    PEM and the certificate in DER."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:
        sys.stderr.write("the host asks for go-plugin's AutoMTLS, which needs the cryptography module: "
                         "install python3-cryptography (Debian), or set plain_channel = true in the group's plugin block\n")
        sys.exit(1)

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "HashiCorp")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(seconds=30))
            .not_valid_after(now + datetime.timedelta(days=365 * 30))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, key_cert_sign=True,
                                         content_commitment=False, data_encipherment=False, key_agreement=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM), cert.public_bytes(serialization.Encoding.DER)


def serve(make_runtime, hello, log, handshake):
    """Serves one worker as a go-plugin plugin until its channel ends, then
    exits the process. make_runtime(send, close) builds the runtime once the
    host has accepted the Hello; handshake is the file go-plugin reads the
    handshake line from (the process's original stdout)."""
    client_cert = os.environ.get("PLUGIN_CLIENT_CERT", "")
    Listener(make_runtime, hello, log, tls=bool(client_cert)).serve(handshake, client_cert)


class Listener:
    """A worker's gRPC server, made and listening before the host that will
    use it is known: a template's spare fork (stickyd.template) makes it
    ahead, so that the start the host waits for is only serve. With tls,
    its key and certificate are its own, made here, and the host's
    certificate (go-plugin's AutoMTLS) is given by serve: until then no
    client can finish a TLS handshake with it, since none holds the key of
    the only root it trusts (its own certificate)."""

    def __init__(self, make_runtime, hello, log, tls):
        # A Ctrl-C in the terminal reaches the whole process group: the
        # host decides when its workers stop (go-plugin's servers ignore it
        # too).
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._log = log
        self._tls = tls
        self._done = threading.Event()
        self._ch = _Channel(make_runtime, hello, log, self._done)
        self._mu = threading.Lock()
        self._next = None  # the certificate configuration serve sets

        def check(raw, context):
            if _health_service(raw) in ("", "plugin"):
                return _SERVING
            context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")

        def shutdown(raw, context):
            self._ch.close()
            self._done.set()
            return b""

        ident = lambda b: b  # noqa: E731 (messages encoded by hand)
        handlers = [
            grpc.method_handlers_generic_handler("stickyd.channel.v1.Worker", {
                "Channel": grpc.stream_stream_rpc_method_handler(
                    self._ch.serve, request_deserializer=pb.Envelope.FromString,
                    response_serializer=pb.Envelope.SerializeToString),
            }),
            grpc.method_handlers_generic_handler("grpc.health.v1.Health", {
                "Check": grpc.unary_unary_rpc_method_handler(check, request_deserializer=ident, response_serializer=ident),
            }),
            grpc.method_handlers_generic_handler("plugin.GRPCController", {
                "Shutdown": grpc.unary_unary_rpc_method_handler(shutdown, request_deserializer=ident,
                                                                response_serializer=ident),
            }),
        ]
        self._server = grpc.server(ThreadPoolExecutor(max_workers=4, thread_name_prefix="stickyd-grpc"),
                                   handlers=handlers,
                                   options=[("grpc.max_receive_message_length", MAX_ENVELOPE),
                                            ("grpc.max_send_message_length", MAX_ENVELOPE)])
        self._cert_field = ""
        if tls:
            key_pem, cert_pem, cert_der = _one_time_cert()
            self._pair = (key_pem, cert_pem)
            initial = grpc.ssl_server_certificate_configuration([self._pair], root_certificates=cert_pem)
            creds = grpc.dynamic_ssl_server_credentials(initial, self._fetch, require_client_authentication=True)
            self.port = self._server.add_secure_port("127.0.0.1:0", creds)
            self._cert_field = "|" + base64.b64encode(cert_der).decode().rstrip("=")
        else:
            self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    def _fetch(self):
        """The configuration for the next TLS handshake: called by gRPC
        before each; None keeps the current one."""
        with self._mu:
            nxt, self._next = self._next, None
        return nxt

    def serve(self, handshake, client_cert):
        """Trusts the host's certificate (tls), tells go-plugin where the
        worker listens, and serves until the channel ends; then exits the
        process."""
        if bool(client_cert) != self._tls:
            sys.stderr.write("the worker was made for %s but the host asks for %s\n" % (
                "AutoMTLS" if self._tls else "a plain channel", "AutoMTLS" if client_cert else "a plain channel"))
            os._exit(1)
        if client_cert:
            with self._mu:
                self._next = grpc.ssl_server_certificate_configuration([self._pair], root_certificates=client_cert.encode())
        handshake.write("%d|%d|tcp|127.0.0.1:%d|grpc%s\n" % (CORE_PROTOCOL, APP_PROTOCOL, self.port, self._cert_field))
        handshake.flush()
        # Pdeathsig (Linux) kills a worker whose host died; elsewhere,
        # notice that the parent changed. A worker forked from a group's
        # template (stickyd.template) has the template for its parent: it
        # watches the host, whose pid the host gave it, instead.
        parent = os.getppid()
        host = int(os.environ.get("STICKYD_HOST_PID") or 0)
        while not self._done.wait(1.0):
            if (host and not _alive(host)) or (not host and os.getppid() != parent):
                self._log.warn("the host is gone; stopping")
                break
        self._server.stop(grace=1).wait(2)
        sys.__stderr__.flush()
        # One channel per process: when the host is done with it, so is the
        # worker (threads still running an app call are not waited for).
        os._exit(0)
