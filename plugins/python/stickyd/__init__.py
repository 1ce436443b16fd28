"""stickyd for Python: host a WSGI application as stickyd workers.

A stickyd host runs `python3 -m stickyd.worker MODULE:CALLABLE` for a group
whose recipe says runtime "python3" (docs/python.md). The worker speaks the
same channel as a Go worker (internal/protocol/stickyd.proto): every request
of a person reaches the worker that holds them, one at a time, and their
state moves with them between workers, and across restarts, in the same
package format.

Inside the app:

* ``stickyd.session()`` (or ``environ["stickyd.session"]``) is the
  connection the request belongs to: ``.conn``, ``.user``, ``.worker_id``,
  ``.login(user, attrs)``, ``.name_connection(name)`` on the first request,
  and ``.values``, the connection's own Tree, which moves with the person.
* Pages (browser tabs on /_stickyd/ws) call the app's hooks, if it has
  them: ``open_page(page)`` fills a new page's tree, ``message(page, msg)``
  handles one message (its return value, JSON, is the answer; raise
  ``stickyd.Refused`` to refuse), ``close_page(page)``. ``schemas``
  declares per page kind the state-schema version (and the oldest one still
  read) for the version rule of docs/moves.md.
* Writes to ``page.tree`` become deltas the page pulls. Trees hold JSON-like
  data only; live objects go in ``page.local``, which does not move.
* Live data (docs/data.md), as in the Go SDK: ``page.subscribe(*tables)``,
  ``page.cached(key, tables, compute)``, ``stickyd.publish(table, data)``
  and the hook ``on_table_change(page, change)`` (tables.py);
  ``stickyd.store.get(*paths)`` and ``stickyd.store.acquire(paths,
  lease=…)``, a grant to ``commit(set, delete)`` or ``release()``, refused
  with ``stickyd.StaleGrant`` once the store no longer holds it (store.py).
* The AI gateway (docs/gateway.md), charged to the person:
  ``page.gateway()`` or ``session.gateway()``, then ``.complete(req)`` (a
  ``GatewayResponse``) or ``.stream(req)`` (``GatewayChunk`` pieces);
  refusals are ``stickyd.GatewayError`` with the gateway's ``kind``
  (gateway.py).
* Maintenance windows (docs/maintenance.md): ``needs =
  stickyd.Needs().route("/orders", "db-a").op("order", "db-a")`` beside the
  hooks; a request or message that needs a backend in maintenance waits
  before its handler runs (maintenance.py).

The SDK never listens on the network beyond the go-plugin socket on
127.0.0.1, and knows nothing of the supervisor.
"""

from . import store
from .gateway import (Gateway, GatewayChunk, GatewayError, GatewayMessage, GatewayRequest, GatewayResponse,
                      GatewayStream, GatewayUsage)
from .maintenance import Needs
from .runtime import Refused
from .session import BadName, Named, Page, Session, current as session
from .store import Grant, StaleGrant, StoreError
from .tables import BadTable, TableChange, publish
from .tree import BadPath, NotData, StateTooLarge, Tree

__all__ = ["BadName", "BadPath", "BadTable", "Gateway", "GatewayChunk", "GatewayError", "GatewayMessage",
           "GatewayRequest", "GatewayResponse", "GatewayStream", "GatewayUsage", "Grant", "Named", "Needs",
           "NotData", "Page", "Refused", "Session", "StaleGrant", "StateTooLarge", "StoreError", "TableChange", "Tree", "publish",
           "session", "store"]
