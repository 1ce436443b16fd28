"""Maintenance windows in the Python SDK (maintenance.py), through a real
runtime behind sdkfront's front: what needs a backend in maintenance waits
in its person's mailbox before its handler runs, holding no thread; it runs
in order when the window ends, is refused MAINTENANCE past the max wait,
yields to a freeze (MOVED), and is counted in the probes."""

import json
import os
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import sdkfront  # noqa: E402
import stickyd  # noqa: E402
from stickyd import stickyd_pb2 as pb  # noqa: E402
from stickyd.maintenance import Needs, go_duration, request_path  # noqa: E402
from stickyd.runtime import Hooks  # noqa: E402

# ran counts the handlers that ran, by what they did.
ran = {}


def app(environ, start_response):
    s = stickyd.session()
    path = environ["PATH_INFO"]
    if path == "/login":
        s.login(environ["QUERY_STRING"].partition("=")[2])
    ran[path] = ran.get(path, 0) + 1
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps({"user": s.user, "path": path}).encode()]


def message(page, msg):
    op = msg.get("op")
    if op in ("inc", "order", "pay"):
        key = {"inc": "count", "order": "orders", "pay": "paid"}[op]
        n = page.tree.number(key) + 1
        page.tree.set(key, n)
        ran[op] = ran.get(op, 0) + 1
        return {key: n}
    raise stickyd.Refused("unknown op %r" % op)


NEEDS = stickyd.Needs().route("/orders", "db-a").op("order", "db-a").op("pay", "db-a", "payments")
HOOKS = Hooks(open_page=lambda page: None, message=message, needs=NEEDS)


def window(*backends, version=1, max_wait_ms=30000, reason="upgrading"):
    return pb.Maintenance(version=version, backends=[
        pb.MaintenanceBackend(name=b, reason=reason, max_wait_ms=max_wait_ms) for b in backends])


class NeedsTest(unittest.TestCase):
    def test_routes_add_up(self):
        n = Needs().route("/orders", "db-a").route("/orders/pay", "payments").route("/", "web")
        self.assertEqual(n.for_path("/orders/pay/7"), ["db-a", "payments", "web"])
        self.assertEqual(n.for_path("/about"), ["web"])
        self.assertEqual(Needs().for_path("/x"), [])
        self.assertEqual(request_path("/orders%2Fx?a=1#f"), "/orders/x")

    def test_messages_by_op(self):
        n = Needs().op("save", "db-a").op("save", "payments").op("", "nothing")
        self.assertEqual(n.for_message(b'{"op": "save", "x": 1}'), ["db-a", "payments"])
        self.assertEqual(n.for_message('{"OP": "save"}'), ["db-a", "payments"])  # as Go's encoding/json matches
        self.assertEqual(n.for_message(b'{"op": "load"}'), [])
        self.assertEqual(n.for_message(b'{"op": 5}'), [])  # Go: an error, no needs
        self.assertEqual(n.for_message(b'[1]'), [])
        self.assertEqual(n.for_message(b'not json'), [])
        self.assertEqual(n.for_message(b'{}'), ["nothing"])  # op "" as Go reads it
        self.assertEqual(n.for_message(b'null'), ["nothing"])

    def test_durations_as_go_says_them(self):
        for s, want in [(0, "0s"), (0.0004, "0s"), (0.45, "450ms"), (1.0, "1s"), (1.0014, "1.001s"),
                        (1.5, "1.5s"), (90, "1m30s"), (60.25, "1m0.25s"), (3600, "1h0m0s"), (3723.1, "1h2m3.1s")]:
            self.assertEqual(go_duration(s), want, s)

    def test_needs_is_checked(self):
        with self.assertRaises(TypeError):
            Hooks(needs={"/orders": "db-a"})


class MaintenanceTest(unittest.TestCase):
    def setUp(self):
        ran.clear()
        self.f = sdkfront.Front(app, workers=2, hooks=HOOKS)
        self.addCleanup(self.f.close)
        self.people = {}

    def person(self, user, worker="py-0"):
        b = sdkfront.Browser()
        self.f.request(b, "GET", "/", place=worker)
        self.f.request(b, "POST", "/login?user=" + user)
        self.f.open(b, "p")
        self.people[user] = b
        return b

    def w(self, user):
        return self.f.workers[self.f.home[user]]

    def start(self, user, **msg):
        """Sends user's page msg without waiting: the queue of its answer."""
        b = self.people[user]
        return self.w(user).start(frame=pb.Frame(user=user, conn=b.conn, epoch=self.f.epochs.get(user, 0),
                                                 message=pb.PageMessage(page="p", data=json.dumps(msg).encode())))

    def notice(self, n, workers=None):
        for wid in workers or self.f.workers:
            self.assertFalse(self.f.workers[wid].call(maintenance=n).HasField("error"))

    def probe(self, wid="py-0"):
        return self.f.workers[wid].call(probe=pb.Probe()).probe_reply

    def answer(self, q, timeout=5):
        env = q.get(timeout=timeout)
        if env.HasField("error"):
            return env.error
        return json.loads(env.frame_reply.message.data or b"null")

    def waiting(self, wid="py-0", want=1):
        deadline = time.monotonic() + 5
        while dict(self.probe(wid).maintenance_waiting).get("db-a", 0) != want:
            self.assertLess(time.monotonic(), deadline, "never %d waiting on db-a" % want)
            time.sleep(0.01)

    def test_held_until_the_window_ends_then_in_order(self):
        self.person("maria")
        self.person("ana")
        self.notice(window("db-a"))
        order = self.start("maria", op="order")
        behind = self.start("maria", op="inc")  # needs nothing, but comes after the order
        # ana's typing is untouched, and so is maria's own HTTP to routes
        # that need nothing... after her order: it queues too.
        self.assertEqual(self.f.message(self.people["ana"], "p", {"op": "inc"}), {"count": 1})
        self.waiting(want=1)
        time.sleep(0.1)
        self.assertTrue(order.empty() and behind.empty())
        self.assertEqual(ran.get("order", 0), 0)  # the handler has not run
        self.assertEqual(self.probe().mailbox_depth, 1)  # the inc waits in the mailbox
        self.notice(window(version=2))
        self.assertEqual(self.answer(order), {"orders": 1})
        self.assertEqual(self.answer(behind), {"count": 1})
        self.assertEqual(dict(self.probe().maintenance_waiting), {})

    def test_holds_no_thread(self):
        # More people held than the worker has threads (4): the others
        # still run at once.
        for i in range(8):
            self.person("o%d" % i)
        self.person("typist")
        self.notice(window("db-a"))
        held = [self.start("o%d" % i, op="order") for i in range(8)]
        self.waiting(want=8)
        for n in range(1, 4):
            self.assertEqual(self.f.message(self.people["typist"], "p", {"op": "inc"}), {"count": n})
        self.assertEqual(self.f.request(self.people["typist"], "GET", "/about").status, 200)
        self.notice(window(version=2))
        self.assertEqual([self.answer(q) for q in held], [{"orders": 1}] * 8)

    def test_wait_is_bounded(self):
        self.person("maria")
        self.notice(window("db-a", max_wait_ms=300, reason="upgrading to 16.4"))
        began = time.monotonic()
        e = self.answer(self.start("maria", op="order"))
        waited = time.monotonic() - began
        self.assertEqual(e.code, pb.Error.MAINTENANCE)
        self.assertRegex(e.message, r"^backend db-a is in maintenance \(upgrading to 16\.4\); waited 3\d\dms, retry later$")
        self.assertGreaterEqual(waited, 0.3)
        self.assertEqual(ran.get("order", 0), 0)  # never ran
        # What needs nothing runs at once; a route that needs db-a is
        # refused too, and the refusals are counted.
        self.assertEqual(self.f.message(self.people["maria"], "p", {"op": "inc"}), {"count": 1})
        b = self.people["maria"]
        env = self.w("maria").frame("maria", b.conn, self.f.epochs.get("maria", 0),
                                    http=pb.HTTPRequest(method="GET", url="/orders"))
        self.assertEqual(env.error.code, pb.Error.MAINTENANCE)
        p = self.probe()
        self.assertEqual((dict(p.maintenance_timed_out), dict(p.maintenance_waiting)), ({"db-a": 2}, {}))
        self.notice(window(version=2))
        self.assertEqual(self.f.message(self.people["maria"], "p", {"op": "order"}), {"orders": 1})

    def test_a_new_notice_rearms_the_bound(self):
        self.person("maria")
        self.notice(window("db-a", max_wait_ms=300))
        q = self.start("maria", op="order")
        self.waiting()
        self.notice(window("db-a", version=2, max_wait_ms=60000))  # longer: it keeps waiting
        time.sleep(0.5)
        self.assertTrue(q.empty())
        self.notice(window("db-a", version=1, max_wait_ms=1))  # an older notice, late: ignored
        time.sleep(0.1)
        self.assertTrue(q.empty())
        self.notice(window(version=3))
        self.assertEqual(self.answer(q), {"orders": 1})

    def test_every_backend_it_needs(self):
        self.person("maria")
        self.notice(window("db-a", "payments"))
        q = self.start("maria", op="pay")
        self.waiting()
        self.assertEqual(dict(self.probe().maintenance_waiting), {"db-a": 1, "payments": 1})
        self.notice(window("payments", version=2))  # db-a is back; payments is not
        time.sleep(0.1)
        self.assertTrue(q.empty())
        self.assertEqual(dict(self.probe().maintenance_waiting), {"payments": 1})
        self.notice(window(version=3))
        self.assertEqual(self.answer(q), {"paid": 1})

    def test_routes_and_new_connections(self):
        self.person("maria")
        self.notice(window("db-a"))
        b = self.people["maria"]
        w = self.w("maria")
        held = w.start(frame=pb.Frame(user="maria", conn=b.conn, http=pb.HTTPRequest(method="GET", url="/orders?x=1")))
        fresh = w.start(frame=pb.Frame(http=pb.HTTPRequest(method="GET", url="/orders")))  # a newcomer
        self.waiting(want=2)
        self.assertEqual(sdkfront.Browser and self.f.request(sdkfront.Browser(), "GET", "/", place="py-0").status, 200)
        self.assertTrue(held.empty() and fresh.empty())
        self.assertEqual(ran.get("/orders", 0), 0)
        self.notice(window(version=2))
        self.assertEqual(held.get(timeout=5).frame_reply.http.status, 200)
        self.assertEqual(fresh.get(timeout=5).frame_reply.http.status, 200)
        self.assertEqual(ran["/orders"], 2)

    def test_held_requests_yield_to_a_freeze(self):
        self.person("maria", worker="py-0")
        self.notice(window("db-a"))
        q = self.start("maria", op="order")
        behind = self.start("maria", op="order")
        self.waiting()
        # The freeze does not wait for the window: the held order, which
        # did not run, is answered MOVED, and so is the one behind it.
        fz = self.f.workers["py-0"].call(freeze=pb.Freeze(user="maria", epoch=1))
        self.assertTrue(fz.HasField("frozen"), fz)
        self.assertEqual(self.answer(q).code, pb.Error.MOVED)
        self.assertEqual(self.answer(behind).code, pb.Error.MOVED)
        self.assertEqual(ran.get("order", 0), 0)
        self.assertEqual(dict(self.probe().maintenance_waiting), {})
        # Woken on the other worker, the order sent again waits there.
        self.assertTrue(self.f.workers["py-1"].call(wake=pb.Wake(user="maria", epoch=1,
                                                                 package=fz.frozen.package)).HasField("woken"))
        self.f.workers["py-0"].call(evict=pb.Evict(user="maria"))
        self.f.home["maria"], self.f.epochs["maria"] = "py-1", 1
        again = self.start("maria", op="order")
        self.waiting("py-1")
        self.notice(window(version=2))
        self.assertEqual(self.answer(again), {"orders": 1})

    def test_a_thaw_lets_them_wait_again(self):
        self.person("maria")
        self.notice(window("db-a"))
        q = self.start("maria", op="order")
        self.waiting()
        self.f.workers["py-0"].call(freeze=pb.Freeze(user="maria", epoch=1))
        self.assertEqual(self.answer(q).code, pb.Error.MOVED)
        self.f.workers["py-0"].call(thaw=pb.Thaw(user="maria", epoch=1))
        self.f.epochs["maria"] = 1
        again = self.start("maria", op="order")
        self.waiting()
        self.notice(window(version=2))
        self.assertEqual(self.answer(again), {"orders": 1})

    def test_a_stop_answers_what_is_held(self):
        self.person("maria")
        self.notice(window("db-a"))
        q = self.start("maria", op="order")
        self.waiting()
        self.f.workers["py-0"].rt.close()
        e = self.answer(q)
        self.assertEqual((e.code, e.message), (pb.Error.INTERNAL, "the worker is stopping"))

    def test_messages_are_read_only_while_a_window_is_open(self):
        self.person("maria")
        self.notice(window("payments"))  # open, but not the order's backend
        self.assertEqual(self.f.message(self.people["maria"], "p", {"op": "order"}), {"orders": 1})
        self.notice(window(version=2))
        self.assertEqual(self.f.message(self.people["maria"], "p", {"op": "order"}), {"orders": 2})


if __name__ == "__main__":
    unittest.main()
