"""python3 -m stickyd.worker [--threads N] [--name NAME] [--version V] MODULE[:CALLABLE]

Runs a WSGI application as a stickyd worker. A stickyd host starts it for a
group whose recipe says runtime "python3" (the recipe's command is
MODULE:CALLABLE; CALLABLE defaults to "application").

Besides the WSGI callable, the app may provide page hooks, looked up on the
callable first and then in its module: open_page(page), message(page, msg),
close_page(page), on_table_change(page, change), schemas
({kind: version | (version, oldest)}) and needs (a stickyd.Needs: the
backends its routes and messages need, docs/maintenance.md).
"""

import argparse
import ast
import importlib
import os
import sys
import traceback

from . import stickyd_pb2 as pb
from .plugin import PROTOCOL_VERSION, Listener, Log, check_host
from .runtime import Hooks, Runtime


def load(spec):
    """The app and its hooks from "module:callable", or from an application
    factory as gunicorn takes it: "module:create_app()", with literal
    arguments if it needs them ("module:create_app('prod')")."""
    modname, _, attr = spec.partition(":")
    module = importlib.import_module(modname)
    attr = (attr or "application").strip()
    call = None
    if "(" in attr:
        attr, call = _factory_call(spec, attr)
    app = module
    for part in attr.split("."):
        app = getattr(app, part)
    if call is not None:
        if not callable(app):
            raise TypeError("%s: %s is not a function to call" % (spec, attr))
        args, kwargs = call
        app = app(*args, **kwargs)
    if not callable(app):
        raise TypeError("%s is not a WSGI callable" % spec)

    def hook(name):
        v = getattr(app, name, None)
        return v if v is not None else getattr(module, name, None)

    hooks = Hooks(open_page=hook("open_page"), message=hook("message"), close_page=hook("close_page"),
                  schemas=hook("schemas"), on_table_change=hook("on_table_change"), needs=hook("needs"))
    return module, app, hooks


def _factory_call(spec, attr):
    """Splits "create_app('x', debug=True)" into the name and its literal
    arguments."""
    try:
        node = ast.parse(attr, mode="eval").body
    except SyntaxError as e:
        raise ValueError("%s: cannot read the factory call %r: %s" % (spec, attr, e)) from None
    if not isinstance(node, ast.Call):
        raise ValueError("%s: %r is not a call" % (spec, attr))
    name = ast.unparse(node.func)
    try:
        args = [ast.literal_eval(a) for a in node.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except ValueError:
        raise ValueError("%s: the factory's arguments must be literals (strings, numbers, lists...)" % spec) from None
    return name, (args, kwargs)


def parser(prog, description):
    """The worker's arguments (the template's take the same, and more)."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("app", help="the WSGI application, MODULE[:CALLABLE]")
    ap.add_argument("--threads", type=int, default=8, help="threads running the app (default 8)")
    ap.add_argument("--name", default="", help="the app's name in the host's logs (default: the module)")
    ap.add_argument("--version", default="", help="the app's version (default: the module's __version__)")
    return ap


def take_handshake():
    """The file go-plugin reads the handshake line from: the process's
    stdout. From now on stdout carries that line and nothing else: whatever
    the app (or a C extension, or a child process) prints to fd 1 goes to
    stderr, the host's log."""
    handshake = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    return handshake


def main(argv=None):
    args = parser("python3 -m stickyd.worker", "Runs a WSGI app as a stickyd worker.").parse_args(argv)
    check_host()
    log = Log()
    handshake = take_handshake()
    try:
        module, app, hooks = load(args.app)
    except Exception as e:
        log.error("loading the WSGI application", app=args.app, error=repr(e), traceback=traceback.format_exc())
        return 1
    run(args, log, handshake, module, app, hooks)


def run(args, log, handshake, module, app, hooks):
    """Serves the loaded app as a worker until its channel ends (the process
    then exits)."""
    client_cert = os.environ.get("PLUGIN_CLIENT_CERT", "")
    listen(args, log, module, app, hooks, tls=bool(client_cert)).serve(handshake, client_cert)


def listen(args, log, module, app, hooks, tls):
    """The worker's listener, made and listening: serve(handshake,
    client_cert) then serves the app on it."""
    name = args.name or args.app.partition(":")[0]
    version = args.version or str(getattr(module, "__version__", ""))
    hello = pb.Hello(protocol_version=PROTOCOL_VERSION, app=name, app_version=version, pid=os.getpid(),
                     package_chunks=True, checkpoints=True,
                     batches=True)

    def make_runtime(send, close):
        return Runtime(app, hooks, send, log, name=name, version=version, threads=max(1, args.threads),
                       on_shutdown=close)

    return Listener(make_runtime, hello, log, tls)


if __name__ == "__main__":
    sys.exit(main())
