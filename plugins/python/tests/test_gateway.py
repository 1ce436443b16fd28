"""The AI gateway from Python workers (gateway.py), through real runtimes
behind sdkfront's front and its fake gateway (the agent's envelopes and
JSON): whole answers and streams, charged to the person; refusals with the
gateway's kind; the call's JSON as the host's gateway.Call reads it."""

import datetime
import json
import os
import re
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))

import sdkfront  # noqa: E402
import stickyd  # noqa: E402
from stickyd import gateway as gwmod  # noqa: E402
from stickyd.runtime import Hooks  # noqa: E402


def app(environ, start_response):
    s = stickyd.session()
    path = environ["PATH_INFO"]
    if path == "/login":
        s.login(environ["QUERY_STRING"].partition("=")[2])
    body = {"user": s.user}
    if path == "/ask":
        # From a request: the connection's person pays (anonymous: its key).
        body["answer"] = s.gateway().complete({"model": "small", "messages": [("user", "from http")]}).content
    start_response("200 OK", [("Content-Type", "application/json")])
    return [json.dumps(body).encode()]


def message(page, msg):
    """{"model", "stream", "timeout", "take"}: the gateway's answer; a
    stream grows at "answer" in the tree, and "take" stops after that many
    pieces. A refusal is "kind|retryable|text"."""
    gw = page.gateway()
    req = stickyd.GatewayRequest(msg["model"], [stickyd.GatewayMessage("user", msg.get("text", "hi"))],
                                 max_tokens=msg.get("max_tokens", 0), temperature=msg.get("temperature"))
    try:
        if not msg.get("stream"):
            r = gw.complete(req, timeout=msg.get("timeout"))
            return {"content": r.content, "cost": r.cost_micros, "provider": r.provider, "deployment": r.deployment,
                    "finish": r.finish_reason, "id": r.id, "model": r.model,
                    "usage": [r.usage.input, r.usage.cached_input, r.usage.cache_write, r.usage.output]}
        text, pieces, last = "", [], None
        with gw.stream(req, timeout=msg.get("timeout")) as st:
            for c in st:
                pieces.append(c.delta)
                if c.delta:
                    text += c.delta
                    page.tree.set("answer", text)
                last = c
                if len(pieces) == msg.get("take"):
                    break
        return {"text": text, "pieces": pieces, "done": last.done, "output": last.usage.output,
                "cost": last.cost_micros, "provider": last.provider, "finish": last.finish_reason}
    except stickyd.GatewayError as e:
        raise stickyd.Refused("%s|%s|%s" % (e.kind, e.retryable, e))


HOOKS = Hooks(open_page=lambda page: None, message=message)


class GatewayTest(unittest.TestCase):
    def setUp(self):
        self.f = sdkfront.Front(app, workers=1, hooks=HOOKS)
        self.addCleanup(self.f.close)
        self.b = sdkfront.Browser()
        self.f.request(self.b, "GET", "/")
        self.f.request(self.b, "POST", "/login?user=maria")
        self.f.open(self.b, "p")
        self.host = self.f.host

    def send(self, **msg):
        return self.f.message(self.b, "p", msg)

    def refused(self, **msg):
        res = self.f.frame(self.b, message=sdkfront.pb.PageMessage(page="p", data=json.dumps(msg).encode())).message
        self.assertTrue(res.error, "%s was not refused" % msg)
        return res.error

    def rt(self):
        return self.f.workers["py-0"].rt

    def test_complete(self):
        r = self.send(model="small")
        self.assertEqual(r, {"content": "hello world", "cost": 55, "provider": "openai", "deployment": "local",
                             "finish": "stop", "id": "r1", "model": "small-v1", "usage": [12, 30, 0, 7]})
        wid, session, call, stream = self.host.gateway_calls[-1]
        self.assertEqual((session, stream), ("maria", False))
        self.assertEqual(call["request"], {"model": "small", "messages": [{"role": "user", "content": "hi"}]})
        self.assertRegex(call["idempotency_key"], r"^wk-[0-9a-f]{24}$")
        self.assertNotIn("deadline", call)
        self.assertEqual(self.rt()._calls, {})

    def test_each_call_its_own_key(self):
        self.send(model="small")
        self.send(model="small")
        keys = {c[2]["idempotency_key"] for c in self.host.gateway_calls}
        self.assertEqual(len(keys), 2)

    def test_timeout_is_the_deadline(self):
        before = datetime.datetime.now(datetime.timezone.utc)
        self.send(model="small", timeout=30, max_tokens=9, temperature=0.5)
        call = self.host.gateway_calls[-1][2]
        self.assertEqual(call["request"]["max_tokens"], 9)
        self.assertEqual(call["request"]["temperature"], 0.5)
        # RFC 3339 in UTC, as Go's time.Time reads it.
        self.assertRegex(call["deadline"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
        d = datetime.datetime.strptime(call["deadline"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
        self.assertAlmostEqual((d - before).total_seconds(), 30, delta=2)

    def test_stream(self):
        r = self.send(model="small", stream=True)
        self.assertEqual(r, {"text": "hello world", "pieces": ["hello", " world", ""], "done": True, "output": 7,
                             "cost": 40, "provider": "openai", "finish": "stop"})
        self.assertEqual(self.host.gateway_calls[-1][1:2] + (self.host.gateway_calls[-1][3],), ("maria", True))
        # The page received one delta per piece.
        ds = self.f.pull(self.b, "p", 0)
        answers = [json.loads(d.value) for d in ds.deltas if d.path == "answer"]
        self.assertEqual(answers, ["hello", "hello world"])
        self.assertEqual((self.rt()._calls, self.rt()._chunks), ({}, {}))

    def test_refusals_keep_their_kind(self):
        self.assertEqual(self.refused(model="big"), 'unknown_model|False|gateway (unknown_model): unknown model "big"')
        self.assertEqual(self.refused(model="big", stream=True),
                         'unknown_model|False|gateway (unknown_model): unknown model "big"')
        self.assertEqual(self.refused(model="budget"),
                         "budget_exceeded|False|gateway (budget_exceeded): the session's budget is spent")
        self.host.gateway = False
        self.assertEqual(self.refused(model="small"), "|True|gateway: this agent has no gateway block")

    def test_stream_failing_midway(self):
        # The piece before the failure reaches the page; the answer says
        # how it ended (retryable: the host said UNAVAILABLE).
        self.assertEqual(self.refused(model="midway", stream=True),
                         "server|True|gateway (server): the provider did not answer: server")
        ds = self.f.pull(self.b, "p", 0)
        self.assertEqual([json.loads(d.value) for d in ds.deltas if d.path == "answer"], ["hel"])

    def test_stream_without_its_last_piece(self):
        self.assertEqual(self.refused(model="cut", stream=True),
                         "server|True|gateway (server): the stream ended without its last chunk")

    def test_stream_left_early(self):
        r = self.send(model="small", stream=True, take=1)
        self.assertEqual(r["pieces"], ["hello"])
        # The rest is dropped: nothing waits for it.
        self.assertEqual(self.rt()._chunks, {})
        self.assertEqual(self.send(model="small")["content"], "hello world")

    def test_no_answer_in_time(self):
        old = gwmod.DEADLINE_MARGIN
        gwmod.DEADLINE_MARGIN = 0.0
        self.addCleanup(setattr, gwmod, "DEADLINE_MARGIN", old)
        began = time.monotonic()
        self.assertEqual(self.refused(model="never", timeout=0.3),
                         "|True|gateway: the host did not answer within 0.3s")
        self.assertGreaterEqual(time.monotonic() - began, 0.3)
        self.assertEqual(self.rt()._calls, {})
        self.assertIn("|True|gateway: the host did not finish the stream in time",
                      self.refused(model="never", stream=True, timeout=0.3))
        self.assertEqual((self.rt()._calls, self.rt()._chunks), ({}, {}))

    def test_channel_closing_fails_the_call(self):
        def close():
            time.sleep(0.2)
            self.rt().close()
        threading.Thread(target=close).start()
        self.assertEqual(self.refused(model="never"), "|True|gateway: the channel closed before the host answered")

    def test_from_a_request_before_login(self):
        b = sdkfront.Browser()
        r = self.f.request(b, "GET", "/ask")
        self.assertEqual(r.json()["answer"], "hello world")
        self.assertEqual(self.host.gateway_calls[-1][1], "~" + b.conn)

    def test_a_call_holds_its_persons_mailbox_only(self):
        # maria's call waits; her next message waits behind it, but
        # another person's message does not.
        w = self.f.workers["py-0"]
        asked = w.start(frame=sdkfront.pb.Frame(user="maria", conn=self.b.conn, message=sdkfront.pb.PageMessage(
            page="p", data=b'{"model": "wait"}')))
        deadline = time.monotonic() + 5
        while not any(c[2]["request"]["model"] == "wait" for c in self.host.gateway_calls):
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.01)
        behind = w.start(frame=sdkfront.pb.Frame(user="maria", conn=self.b.conn, message=sdkfront.pb.PageMessage(
            page="p", data=b'{"model": "small"}')))
        other = sdkfront.Browser()
        self.f.request(other, "POST", "/login?user=ana")
        self.f.open(other, "q")
        self.assertEqual(self.f.message(other, "q", {"model": "small"})["content"], "hello world")
        time.sleep(0.1)
        self.assertTrue(behind.empty() and asked.empty())
        self.host.release.set()
        self.assertEqual(json.loads(asked.get(timeout=5).frame_reply.message.data)["content"], "waited")
        self.assertEqual(json.loads(behind.get(timeout=5).frame_reply.message.data)["content"], "hello world")


class WireTest(unittest.TestCase):
    """The SDK reads and writes the gateway's own JSON (the Go SDK's
    TestGatewayWireMatchesTheGateway): what internal/gateway's Response and
    Chunk marshal to, and the Call it unmarshals."""

    def test_call(self):
        req = stickyd.GatewayRequest("small", [{"role": "user", "content": "hi"}], max_tokens=9, temperature=0.5)
        call = json.loads(gwmod.encode_call(req, key="k"))
        self.assertEqual(call, {"request": {"model": "small", "messages": [{"role": "user", "content": "hi"}],
                                            "max_tokens": 9, "temperature": 0.5}, "idempotency_key": "k"})
        # Empty fields are left out, as Go's omitempty does.
        call = json.loads(gwmod.encode_call({"model": "m"}, key="k"))
        self.assertEqual(call["request"], {"model": "m", "messages": []})

    def test_response(self):
        # json.Marshal(gateway.Response{ID: "i", Model: "m", Content: "c", FinishReason: "stop",
        #     Usage: gateway.Usage{1, 2, 3, 4}, Provider: "p", Deployment: "d", CostMicros: 5})
        raw = ('{"id":"i","model":"m","content":"c","finish_reason":"stop","usage":{"input_tokens":1,'
               '"cached_input_tokens":2,"cache_write_tokens":3,"output_tokens":4},"provider":"p","deployment":"d",'
               '"cost_micros":5}')
        r = stickyd.GatewayResponse.from_json(json.loads(raw))
        self.assertEqual((r.id, r.model, r.content, r.finish_reason, r.provider, r.deployment, r.cost_micros),
                         ("i", "m", "c", "stop", "p", "d", 5))
        self.assertEqual(r.usage, stickyd.GatewayUsage(1, 2, 3, 4))

    def test_chunk(self):
        raw = ('{"delta":"x","done":true,"finish_reason":"stop","usage":{"input_tokens":1,"cached_input_tokens":2,'
               '"cache_write_tokens":3,"output_tokens":4},"provider":"p","deployment":"d","cost_micros":6}')
        c = stickyd.GatewayChunk.from_json(json.loads(raw))
        self.assertEqual((c.delta, c.done, c.finish_reason, c.provider, c.deployment, c.cost_micros),
                         ("x", True, "stop", "p", "d", 6))
        self.assertEqual(c.usage, stickyd.GatewayUsage(1, 2, 3, 4))
        # A middle piece: no usage at all.
        c = stickyd.GatewayChunk.from_json({"delta": "y"})
        self.assertEqual((c.delta, c.done, c.usage), ("y", False, stickyd.GatewayUsage()))

    def test_error_text(self):
        self.assertEqual(str(stickyd.GatewayError("rate_limited", "slow down", True)), "gateway (rate_limited): slow down")
        self.assertEqual(str(stickyd.GatewayError("", "no host")), "gateway: no host")
        self.assertTrue(re.match(r"^wk-[0-9a-f]{24}$", gwmod.new_call_key()))


if __name__ == "__main__":
    unittest.main()
