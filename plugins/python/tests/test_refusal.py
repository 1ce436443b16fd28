"""A page's refusal carries its code and retry (MessageResult.code, retry),
as the Go SDK's worker.Refusal, and is remembered by its msg_id."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from stickyd import stickyd_pb2 as pb  # noqa: E402
from test_precopy import Worker  # noqa: E402


class RefusalTest(unittest.TestCase):
    def test_code_and_retry(self):
        w = Worker("py-1")
        try:
            conn = w.frame("", "", http=pb.HTTPRequest(method="GET", url="/")).frame_reply.identity.conn
            user = "~" + conn
            w.frame(user, conn, 1, open=pb.PageOpen(page="p", kind="grid"))

            def send(msg, mid=""):
                r = w.frame(user, conn, 1, message=pb.PageMessage(page="p", data=json.dumps(msg).encode(), msg_id=mid))
                return r.frame_reply.message

            res = send({"op": "refuse", "text": "sold out", "code": "sold_out", "retry": True}, "m1")
            self.assertEqual((res.error, res.code, res.retry), ("sold out", "sold_out", True))
            # Sent again: the same answer, from the page's memory.
            again = send({"op": "note", "k": "x", "v": 1}, "m1")
            self.assertEqual((again.error, again.code, again.retry), ("sold out", "sold_out", True))
            plain = send({"op": "refuse", "text": "no"})
            self.assertEqual((plain.error, plain.code, plain.retry), ("no", "", False))
            # A write past the page's bound: state_too_large.
            w.rt.max_page_bytes = 1000
            big = send({"op": "fill", "n": 5})
            self.assertEqual(big.code, "state_too_large")
            self.assertFalse(big.retry)
        finally:
            w.rt.close()


if __name__ == "__main__":
    unittest.main()
