"""python3 -m stickyd.template --build MODULE:FUNCTION --socket PATH [worker options] MODULE[:CALLABLE]

A group's template process (docs/templates.md, "Python: templates by
fork"). A stickyd host starts it once for a python3 group whose plugin
block has a template: it imports the app, runs the build step once
(loading data, warming caches), freezes what it built out of the garbage
collector's reach (so the children's pages stay shared), and then forks one
worker per request of the host. Each worker opens its own channel after the
fork: the template never made a gRPC object, a thread or a socket besides
its own listener, so nothing of the kind crosses a fork.

The host asks on a Unix socket (PATH, in a private directory): one
connection per worker, carrying the worker's environment as JSON and, as
SCM_RIGHTS, the two pipes that become the worker's stdout (go-plugin's
handshake) and stderr (its log). The template answers {"pid": N} and the
worker is on its own: the host watches it by pid, and the worker watches
the host (STICKYD_HOST_PID), not the template, so a template that dies
(and is built again by the host) takes no worker with it. Children are
reaped by the kernel (SIGCHLD ignored).

A spare: when the host uses go-plugin's AutoMTLS (it says so with
STICKYD_TEMPLATE_SPARE=tls, or a request carries PLUGIN_CLIENT_CERT), the
template keeps one fork ready ahead of the next request: forked, its own
key and certificate made, its gRPC server listening and trusting nobody
yet. A request then goes to the spare (its environment and pipes, through a
socket pair), which takes them, trusts the host's certificate and writes
its handshake line at once; the template answers with the spare's pid and
forks the next spare. The fork, the key and the server's start (about 50
ms together) are then no longer in the start the host waits for. A spare
whose template is gone (its socket pair ends) exits; a request for a plain
channel is forked as it comes.

The template writes "ready" on its stdout once built; an error (the app or
the build step raised) is logged with its traceback and ends it.
"""

import gc
import json
import os
import random
import signal
import socket
import sys
import time
import traceback

from .plugin import Log, check_host, prepare
from .worker import listen, load, parser, run, take_handshake

# MAX_REQUEST bounds a fork request (the worker's environment).
MAX_REQUEST = 1 << 20

# SPARE_ENV set to "tls" has the template keep a spare from the start.
SPARE_ENV = "STICKYD_TEMPLATE_SPARE"


class _Spare:
    """The fork kept ready, and the template's end of its socket pair."""

    def __init__(self, pid, sock):
        self.pid = pid
        self.sock = sock


def resolve(spec):
    """The build step named "module:function"."""
    import importlib
    modname, _, attr = spec.partition(":")
    if not modname or not attr:
        raise ValueError("template build %r: give MODULE:FUNCTION" % spec)
    fn = importlib.import_module(modname)
    for part in attr.split("."):
        fn = getattr(fn, part)
    if not callable(fn):
        raise TypeError("template build %s is not a function" % spec)
    return fn


def main(argv=None):
    ap = parser("python3 -m stickyd.template", "A group's template process: builds once, forks each worker.")
    ap.add_argument("--build", required=True, help="the build step, MODULE:FUNCTION, run once")
    ap.add_argument("--socket", required=True, help="the Unix socket the host asks for workers on")
    args = ap.parse_args(argv)
    check_host()
    log = Log()
    ready = take_handshake()
    began = time.monotonic()
    try:
        module, app, hooks = load(args.app)
        resolve(args.build)()
    except Exception as e:
        log.error("building the template", app=args.app, build=args.build, error=repr(e),
                  traceback=traceback.format_exc())
        return 1
    prepare()
    # What the build made stays where it is: the collector no longer walks
    # (and writes to) those objects, so the forks share their pages.
    gc.collect()
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    try:
        os.unlink(args.socket)
    except FileNotFoundError:
        pass
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(args.socket)
    listener.listen(64)
    listener.settimeout(1.0)
    log.info("template built", app=args.app, build=args.build, took_ms=int((time.monotonic() - began) * 1000),
             frozen_objects=gc.get_freeze_count())
    ready.write("ready\n")
    ready.flush()
    parent = os.getppid()
    keep_spare = os.environ.get(SPARE_ENV) == "tls"
    spare = None
    while True:
        if os.getppid() != parent:
            log.warn("the host is gone; stopping the template")
            return 0
        if keep_spare and spare is None:
            spare = _fork_spare(listener, args, module, app, hooks, log)
        try:
            conn, _ = listener.accept()
        except socket.timeout:
            continue
        with conn:
            conn.settimeout(10)
            try:
                msg, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 2)
                req = json.loads(msg)
                if len(fds) != 2 or not isinstance(req.get("env"), dict):
                    raise ValueError("a fork request carries the environment and two pipes")
            except Exception as e:
                log.warn("a fork request the template cannot read", error=repr(e))
                continue
            tls = bool(req["env"].get("PLUGIN_CLIENT_CERT"))
            pid = 0
            if spare is not None and tls:
                try:
                    socket.send_fds(spare.sock, [msg], fds)
                    pid = spare.pid
                except OSError as e:
                    log.warn("the spare fork did not take its request; forking one", pid=spare.pid, error=repr(e))
                spare.sock.close()  # taken, or gone
                spare = None
            if not pid:
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    if spare is not None:
                        spare.sock.close()
                    _child(fds, req["env"], args, module, app, hooks)  # never returns
            for fd in fds:
                os.close(fd)
            keep_spare = tls
            if not tls and spare is not None:
                spare.sock.close()  # it exits: this host asks for plain channels
                spare = None
            try:
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            except OSError as e:
                log.warn("answering a fork request", pid=pid, error=repr(e))


def _fork_spare(listener, args, module, app, hooks, log):
    """Forks the spare; None if the system refused the fork (the next
    request is forked as it comes)."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError as e:
        log.warn("forking a spare worker", error=repr(e))
        mine.close()
        theirs.close()
        return None
    if pid == 0:
        listener.close()
        mine.close()
        _spare(theirs, args, module, app, hooks)  # never returns
    theirs.close()
    return _Spare(pid, mine)


def _spare(sock, args, module, app, hooks):
    """The spare's life: its listener made ahead, then the request it is
    given (or the end of its template), then the worker's life."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        random.seed()
        lst = listen(args, Log(), module, app, hooks, tls=True)
        msg, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 2)
        if not msg:
            os._exit(0)  # the template is gone: nobody will ask
        sock.close()
        env = json.loads(msg)["env"]
        _stdio(fds)
        _environ(env)
        check_host()
        lst.serve(take_handshake(), os.environ.get("PLUGIN_CLIENT_CERT", ""))
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)


def _stdio(fds):
    """Makes the request's pipes the process's stdout and stderr."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (null, *fds):
        os.close(fd)


def _environ(env):
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})


def _child(fds, env, args, module, app, hooks):
    """The worker side of a fork: its own stdio, environment and random
    state, then the worker's life (which ends the process)."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _stdio(fds)
        _environ(env)
        random.seed()
        log = Log()
        run(args, log, take_handshake(), module, app, hooks)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
