package e2e

import (
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/agent"
)

// A group's page bounds (group { max_pages_per_conn, max_page_bytes }) are
// the operator's: they reach its workers in their handshake and hold over
// the SDK's defaults. Past them an open or a write is refused with a
// message the page sees; the worker goes on serving.
func TestGroupPageBounds(t *testing.T) {
	// Go workers in both modes, and Python ones (issue 44): the same
	// bounds, the same refusals.
	for _, mode := range append(modes, "python") {
		t.Run(mode, func(t *testing.T) {
			opts := []option{func(c *agent.Config) {
				c.Groups[0].MaxPagesPerConn = 2
				c.Groups[0].MaxPageBytes = 1 << 20
			}}
			if mode == "python" {
				mode, opts = "subprocess", append(opts, withPycounter(pythonRepo(t)))
			}
			a := startAgentWith(t, mode, 1, opts...)
			b := newBrowser(t, a)
			b.do("POST", "/login?user=lim")
			one := b.openTab("one")
			b.openTab("two")
			third := &tab{t: t, b: b, page: "three", kind: "counter", tree: map[string]any{}}
			ws, _, err := b.dial()
			if err != nil {
				t.Fatal(err)
			}
			third.ws = ws
			ans := third.op(map[string]any{"op": "open", "kind": "counter", "after": 0})
			if ans.Error == "" || !strings.Contains(ans.Error, "close one first") {
				t.Fatalf("a third page on a connection bounded to 2: %+v", ans)
			}
			ans, err = one.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "fill", "bytes": 2 << 20}})
			if err != nil {
				t.Fatal(err)
			}
			if ans.Error == "" || !strings.Contains(ans.Error, "at most 1048576") {
				t.Fatalf("a 2 MiB write on a page bounded to 1 MiB: %+v", ans)
			}
			// Within the bound all is well.
			ans = one.send(map[string]any{"op": "fill", "bytes": 512 << 10})
			if !strings.Contains(string(ans.Data), "524288") {
				t.Fatalf("a 512 KiB write: %s", ans.Data)
			}
		})
	}
}
