package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// One connection opening page after page (100,000 with STICKYD_SOAK=full,
// 2,000 in make test) is refused past the page bound (100 per connection
// by default), each refusal saying why; the worker holds 100 pages, not
// the rest, and keeps serving the ones it holds.
func TestPageOpensPastTheBound(t *testing.T) {
	opens := 2_000
	if os.Getenv("STICKYD_SOAK") == "full" {
		opens = 100_000
	}
	a := startAgentWith(t, "subprocess", 1)
	b := newBrowser(t, a)
	b.do("POST", "/login?user=opener")
	first := b.openTab("p0")
	refused := 0
	for i := 1; i < opens; i++ {
		ans, err := first.tryOp(map[string]any{"op": "open", "page": "p" + strconv.Itoa(i), "kind": "counter"})
		switch {
		case err != nil:
			t.Fatalf("open %d: %v", i, err)
		case ans.Opened != nil:
		case strings.Contains(ans.Error, "close one first"):
			refused++
		default:
			t.Fatalf("open %d: %+v", i, ans)
		}
	}
	if want := opens - 100; refused != want {
		t.Fatalf("%d of %d opens refused, want %d (past the bound of 100)", refused, opens, want)
	}
	r, err := a.Pool().Probe(t.Context(), a.Pool().Ready()[0])
	if err != nil || r.Pages != 100 {
		t.Fatalf("the worker holds %d pages (%v), want 100", r.Pages, err)
	}
	ans := first.send(map[string]any{"op": "inc"})
	if !strings.Contains(string(ans.Data), `"count":1`) {
		t.Fatalf("the first page after the refusals: %s", ans.Data)
	}
}
