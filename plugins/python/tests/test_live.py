"""Live data in the Python SDK (tables.py, store.py), through real runtimes
behind sdkfront's front and host: table subscriptions and publishes, cached
values, the global store and its grants, and how subscriptions and cache
marks travel in a person's package (docs/data.md)."""

import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import sdkfront  # noqa: E402
import stickyd  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.runtime import HostError, Hooks, Runtime  # noqa: E402


def app(environ, start_response):
    s = stickyd.session()
    if environ["PATH_INFO"] == "/login":
        s.login(environ["QUERY_STRING"].partition("=")[2])
    if environ["PATH_INFO"] == "/publish":
        stickyd.publish("orders", {"via": "http"})
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"user": s.user, "worker": s.worker_id}).encode()]


def open_page(page):
    page.tree.set("count", 0)


# computed counts the calls of the cache op's compute, by key.
computed = {}


def message(page, msg):
    op = msg["op"]
    try:
        if op == "sub":
            return page.subscribe(*msg["tables"])
        if op == "unsub":
            return page.unsubscribe(*msg["tables"])
        if op == "tables":
            return page.tables()
        if op == "pub":
            return stickyd.publish(msg["table"], msg.get("v"))
        if op == "cache":
            def compute():
                computed[msg["key"]] = computed.get(msg["key"], 0) + 1
                return msg["v"]
            return page.cached(msg["key"], msg["tables"], compute)
        if op == "sget":
            return stickyd.store.get(*msg["paths"])
        if op == "sincr":
            g = stickyd.store.acquire(msg["paths"], lease=msg.get("lease"), wait=msg.get("wait"))
            n = g.values.get(msg["key"], 0) + 1
            time.sleep(msg.get("pause", 0))
            g.commit({msg["key"]: n})
            return n
        if op == "shold":
            return stickyd.store.acquire(msg["paths"], lease=msg.get("lease")).token
        if op == "twice":
            # A commit, then the grant used again.
            g = stickyd.store.acquire(msg["paths"])
            g.commit({msg["paths"][0]: 1})
            g.release()  # after a commit: nothing to do, no call
            g.commit({msg["paths"][0]: 2})
        if op in ("outside", "notdata"):
            # Refused commits: the grant is still held until released.
            g = stickyd.store.acquire(["a"])
            try:
                g.commit({"b/c": 1} if op == "outside" else {"a": object()})
            finally:
                g.release()
    except (stickyd.StoreError, ValueError, TypeError) as e:
        raise stickyd.Refused("%s: %s" % (type(e).__name__, e))
    raise stickyd.Refused("unknown op %r" % op)


def on_table_change(page, c):
    t = page.tree
    if c.table == "boom":
        raise RuntimeError("the app fails on boom")
    t.set("heard/" + c.table, t.number("heard/" + c.table) + 1)
    t.set("heard_data/" + c.table, c.data)
    t.set("heard_origin/" + c.table, c.origin)
    t.set("heard_by/" + c.table, stickyd.session().conn)
    if c.table == "seq":
        t.set("seqlog", t.get("seqlog", []) + [c.data])


HOOKS = Hooks(open_page=open_page, message=message, on_table_change=on_table_change)


class Tab:
    """A page of browser b, its deltas applied to a flat map as client.js
    does."""

    def __init__(self, front, b, page="p"):
        self.f, self.b, self.page = front, b, page
        self.last = 0
        self.tree = {}
        self.deltas = []  # (op, path) of every delta applied
        front.open(b, page)

    def send(self, **msg):
        return self.f.message(self.b, self.page, msg)

    def refused(self, **msg):
        """The refusal of msg (it must be refused)."""
        try:
            self.send(**msg)
        except AssertionError as e:
            return str(e)
        raise AssertionError("%s was not refused" % msg)

    def pull(self, wait_ms=0):
        ds = self.f.pull(self.b, self.page, self.last, wait_ms)
        for d in ds.deltas:
            if d.op == pb.Delta.SET:
                self.tree[d.path] = json.loads(d.value)
                self.deltas.append(("set", d.path))
            elif d.op == pb.Delta.DELETE:
                self.tree.pop(d.path, None)
                self.deltas.append(("delete", d.path))
            else:
                raise AssertionError("the page was reset: %s" % d.notice)
        self.last = max(self.last, ds.last)

    def until(self, path, want, timeout=5.0):
        deadline = time.monotonic() + timeout
        while self.tree.get(path) != want:
            if time.monotonic() > deadline:
                raise AssertionError("%s never became %r: %s" % (path, want, self.tree))
            self.pull(200)


class RecLog(sdkfront.NullLog):
    """Keeps the warnings."""

    def __init__(self):
        self.warned = []

    def warn(self, msg, **kv):
        self.warned.append(msg)


class LiveTest(unittest.TestCase):
    def setUp(self):
        computed.clear()
        self.log = RecLog()
        self.front = sdkfront.Front(app, workers=2, hooks=HOOKS, log=self.log)

    def tearDown(self):
        self.front.close()

    def person(self, user, worker):
        b = sdkfront.Browser()
        self.front.request(b, "POST", "/login?user=" + user, place=worker)
        self.assertEqual(self.front.home[user], worker)
        return b, Tab(self.front, b)

    def waitTables(self, want):
        deadline = time.monotonic() + 5
        while {w: sorted(self.front.host.tables.get(w, ())) for w in want} != want:
            if time.monotonic() > deadline:
                self.fail("the host's tables %s, want %s" % (self.front.host.tables, want))
            time.sleep(0.01)


class TablesTest(LiveTest):
    def test_reach_subscribers_only(self):
        """A change reaches the subscribed pages and only them: the
        originator's worker delivers it itself, the host carries it to the
        other worker with a subscriber; a table nobody else watches costs
        no send."""
        _, origin = self.person("origin", "py-0")
        _, local = self.person("local", "py-0")
        _, remote = self.person("remote", "py-1")
        _, other = self.person("other", "py-1")
        local.send(op="sub", tables=["orders"])
        remote.send(op="sub", tables=["orders"])
        other.send(op="sub", tables=["stock"])
        self.assertEqual(remote.send(op="tables"), ["orders"])
        self.waitTables({"py-0": ["orders"], "py-1": ["orders", "stock"]})

        origin.send(op="pub", table="orders", v={"id": 7})
        local.until("heard/orders", 1)
        remote.until("heard/orders", 1)
        self.assertEqual((remote.tree["heard_data/orders"], remote.tree["heard_origin/orders"]), ({"id": 7}, "py-0"))
        self.assertEqual(local.tree["heard_origin/orders"], "py-0")
        # The handler ran as the page's connection.
        self.assertEqual(remote.tree["heard_by/orders"], remote.b.conn)
        other.pull(100)
        origin.pull(100)
        self.assertNotIn("heard/orders", other.tree)
        self.assertNotIn("heard/orders", origin.tree)
        self.assertEqual((self.front.host.published, self.front.host.sends), (1, {"py-1": 1}))

        origin.send(op="pub", table="nobody", v=1)
        self.assertEqual(self.front.host.unwatched, 1)
        # Published from a site request, with its data.
        self.front.request(origin.b, "GET", "/publish")
        remote.until("heard/orders", 2)
        self.assertEqual(remote.tree["heard_data/orders"], {"via": "http"})

        # Unsubscribed, the page hears no more, and the worker's set
        # shrinks; a closed page leaves the set too.
        remote.send(op="unsub", tables=["orders"])
        other.f.frame(other.b, close=pb.PageClose(page="p"))
        self.waitTables({"py-0": ["orders"], "py-1": []})
        origin.send(op="pub", table="orders")
        local.until("heard/orders", 3)
        self.assertIsNone(local.tree["heard_data/orders"])
        remote.pull(100)
        self.assertEqual(remote.tree["heard/orders"], 2)
        self.assertEqual(self.front.host.sends, {"py-1": 2})

    def test_order_and_failures(self):
        """Changes from one worker reach a page in the order published; an
        app that fails on one change is logged and hears the next."""
        _, pub = self.person("pub", "py-0")
        _, sub = self.person("sub", "py-1")
        sub.send(op="sub", tables=["seq", "boom"])
        self.waitTables({"py-0": [], "py-1": ["boom", "seq"]})
        for i in range(20):
            pub.send(op="pub", table="seq", v=i)
            if i == 10:
                pub.send(op="pub", table="boom")
        sub.until("heard/seq", 20)
        self.assertEqual(sub.tree["seqlog"], list(range(20)))
        self.assertEqual(self.log.warned, ["the app failed on a table change"])

    def test_bad_tables(self):
        _, t = self.person("ann", "py-0")
        self.assertIn("BadTable", t.refused(op="sub", tables=["Orders"]))
        self.assertIn("BadTable", t.refused(op="pub", table="", v=1))
        self.assertIn("TypeError", t.refused(op="cache", key="k", tables="orders", v=1))
        self.assertIn("ValueError", t.refused(op="cache", key="a/b", tables=["orders"], v=1))
        self.assertEqual(t.send(op="tables"), [])
        with self.assertRaises(RuntimeError):
            stickyd.publish("orders", 1)  # outside a handler
        with self.assertRaises(RuntimeError):
            stickyd.store.get("a")


class CachedTest(LiveTest):
    def test_cached_values(self):
        """A cached value is computed once, shown at cache/<key>, deleted by
        a delta when a table it is marked with changes, and computed again
        at the next call; values marked with other tables stay."""
        _, t = self.person("ann", "py-0")
        self.assertEqual(t.send(op="cache", key="total", tables=["orders"], v=42), 42)
        self.assertEqual(t.send(op="cache", key="total", tables=["orders"], v=43), 42)
        self.assertEqual(t.send(op="cache", key="stock", tables=["stock"], v={"n": 1}), {"n": 1})
        self.assertEqual(computed, {"total": 1, "stock": 1})
        self.assertEqual(t.send(op="tables"), ["orders", "stock"])
        t.until("cache/total", 42)
        t.send(op="pub", table="orders", v=1)
        t.until("heard/orders", 1)
        self.assertNotIn("cache/total", t.tree)
        self.assertIn(("delete", "cache/total"), t.deltas)
        self.assertEqual(t.tree["cache/stock"], {"n": 1})
        self.assertEqual(t.send(op="cache", key="total", tables=["orders"], v=43), 43)
        self.assertEqual(computed, {"total": 2, "stock": 1})


class MoveTest(LiveTest):
    def test_subscriptions_and_marks_travel(self):
        """The package carries the page's tables and cache marks as the Go
        SDK writes them; where the person wakes, the page subscribes again
        (the worker tells the host), hears once of each table with no data
        (its cached values marked with it are invalidated: they may have
        changed on the way), and hears the next change through the host."""
        _, pub = self.person("pub", "py-0")
        _, t = self.person("ann", "py-0")
        t.send(op="sub", tables=["orders"])
        t.send(op="cache", key="total", tables=["stock"], v=42)
        t.send(op="cache", key="fixed", tables=[], v="kept")
        t.until("cache/total", 42)
        self.waitTables({"py-0": ["orders", "stock"]})

        fz = self.front.move("ann", "py-1")
        pkg = pb.UserPackage()
        pkg.ParseFromString(fz.package)
        pp = pkg.conns[0].pages[0]
        self.assertEqual(list(pp.tables), ["orders", "stock"])
        self.assertEqual({k: list(v.tables) for k, v in pp.marks.items()}, {"cache/total": ["stock"], "cache/fixed": []})
        self.waitTables({"py-0": [], "py-1": ["orders", "stock"]})

        t.until("heard/stock", 1)
        t.until("heard/orders", 1)
        self.assertEqual((t.tree["heard_data/orders"], t.tree["heard_origin/orders"]), (None, ""))
        self.assertIn(("delete", "cache/total"), t.deltas)
        self.assertNotIn("cache/total", t.tree)
        # A value marked with no table is not invalidated: it is not
        # computed again.
        self.assertEqual(t.send(op="cache", key="fixed", tables=[], v="new"), "kept")
        self.assertEqual(computed, {"total": 1, "fixed": 1})
        self.assertEqual(t.send(op="tables"), ["orders", "stock"])

        pub.send(op="pub", table="orders", v={"id": 8})
        t.until("heard/orders", 2)
        self.assertEqual((t.tree["heard_data/orders"], t.tree["heard_origin/orders"]), ({"id": 8}, "py-0"))
        self.assertEqual(self.front.host.sends, {"py-1": 1})

    def test_package_from_another_sdk(self):
        """A package written by hand as the Go SDK writes it (tables, marks):
        the woken page subscribes to its tables and honours its marks."""
        from stickyd.tree import encode_value
        w = self.front.workers["py-1"]
        pkg = pb.UserPackage(format=1, user="gus", epoch=3)
        cp = pkg.conns.add(name="gus-conn", user="gus", values=encode_value({}))
        pp = cp.pages.add(id="p", kind="k", tree=encode_value({"count": 5, "cache": {"total": 9}}), seq=7, floor=7)
        pp.tables.extend(["orders"])
        pp.marks["cache/total"].tables.extend(["orders"])
        self.assertFalse(w.call(wake=pb.Wake(user="gus", epoch=3, package=pkg.SerializeToString())).HasField("error"))
        self.waitTables({"py-1": ["orders"]})
        ops, last = [], 7
        deadline = time.monotonic() + 5
        while ("set", "heard/orders") not in ops and time.monotonic() < deadline:
            ds = w.frame("gus", "gus-conn", 3, pull=pb.PagePull(page="p", after=last, wait_ms=200)).frame_reply.deltas
            ops += [(pb.Delta.Op.Name(d.op).lower(), d.path) for d in ds.deltas]
            last = max(last, ds.last)
        self.assertEqual(ops[:2], [("delete", "cache/total"), ("set", "heard/orders")])


class StoreTest(LiveTest):
    def test_grants_lose_no_update(self):
        """People on two workers increment one value under grants on
        overlapping path sets: no update is lost."""
        tabs = [self.person("g%d" % i, "py-%d" % (i % 2))[1] for i in range(6)]
        sets = [["shared/n"], ["shared"], ["shared/n", "other/x"]]
        errors = []

        def run(i, t):
            for _ in range(15):
                try:
                    t.send(op="sincr", key="shared/n", paths=sets[i % 3])
                except AssertionError as e:
                    errors.append(e)
                    return

        threads = [threading.Thread(target=run, args=(i, t)) for i, t in enumerate(tabs)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        self.assertEqual(errors, [])
        self.assertEqual(tabs[0].send(op="sget", paths=["shared"]), {"shared/n": 90})
        self.assertEqual(tabs[1].send(op="sget", paths=["nothing"]), {})

    def test_stale_and_refused(self):
        _, holder = self.person("holder", "py-0")
        _, t = self.person("ann", "py-1")
        # A commit after the lease ran out is refused; nothing is written.
        e = t.refused(op="sincr", key="k", paths=["k"], lease=0.1, pause=0.3)
        self.assertIn("StaleGrant", e)
        self.assertIn("no longer held", e)
        self.assertEqual(t.send(op="sget", paths=["k"]), {})
        # A grant is used once.
        e = t.refused(op="twice", paths=["once"])
        self.assertIn("StaleGrant: committing grant", e)
        self.assertIn("already committed or released here", e)
        self.assertEqual(t.send(op="sget", paths=["once"]), {"once": 1})
        # A wait that runs out, a write outside the grant, a value that is
        # not data.
        holder.send(op="shold", paths=["locks/k"], lease=60)
        e = t.refused(op="sincr", key="locks/k", paths=["locks"], wait=0.2)
        self.assertIn("StoreError: acquiring a grant: UNAVAILABLE", e)
        e = t.refused(op="outside")
        self.assertIn("StoreError: committing grant", e)
        self.assertIn("BAD_REQUEST", e)
        self.assertIn("NotData: committing grant", t.refused(op="notdata"))
        # Released after each refusal, the grant on "a" is free at once.
        self.assertIn("BAD_REQUEST", t.refused(op="outside"))


class CallsTest(unittest.TestCase):
    def test_calls_end(self):
        """A call to the host fails when the channel closes or its wait
        passes; a reply nobody waits for is dropped."""
        sent = []
        rt = Runtime(app, Hooks(), sent.append, sdkfront.NullLog())
        try:
            with self.assertRaises(HostError) as e:
                rt.call(timeout=0.05, store_get=pb.StoreGet(paths=["a"]))
            self.assertEqual(e.exception.code, pb.Error.UNAVAILABLE)
            self.assertIn("did not answer", str(e.exception))
            rt.handle(pb.Envelope(id=sent[-1].id, reply=True, store_values=pb.StoreValues()))  # late: dropped
            got = []

            def waiting():
                try:
                    rt.call(store_get=pb.StoreGet(paths=["a"]))
                except HostError as e:
                    got.append(e)

            th = threading.Thread(target=waiting)
            th.start()
            deadline = time.monotonic() + 5
            while len(sent) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            # An answer with an error, to the right id only.
            rt.handle(pb.Envelope(id=sent[-1].id + 100, reply=True, error=pb.Error(code=pb.Error.BAD_REQUEST)))
            self.assertTrue(th.is_alive())
        finally:
            rt.close()
        th.join(5)
        self.assertEqual([e.code for e in got], [pb.Error.UNAVAILABLE])
        self.assertIn("channel closed", str(got[0]))
        with self.assertRaises(HostError):
            rt.call(store_get=pb.StoreGet(paths=["a"]))
        self.assertEqual([env.id for env in sent], [2, 3])


if __name__ == "__main__":
    unittest.main()
