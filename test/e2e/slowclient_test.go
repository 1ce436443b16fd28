package e2e

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// A client that sends and never reads its answers is closed by the front
// once its answers back up; meanwhile another person's messages go on,
// answered every one, while the slow socket is still stuck.
func TestSlowReaderDelaysNobody(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, mode, 1)
			slow := newBrowser(t, a)
			if code, body := slow.do("GET", "/"); code != http.StatusOK {
				t.Fatalf("loading the site: %d %s", code, body)
			}
			ws, _, err := slow.dial()
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			if err := ws.WriteJSON(map[string]any{"op": "open", "id": 1, "page": "p", "kind": "counter"}); err != nil {
				t.Fatal(err)
			}
			// Big answers, never read: the socket's buffers fill, then the
			// front's queue for it.
			payload := strings.Repeat("x", 60<<10)
			sent := 0
			for i := 2; i < 2000; i++ {
				_ = ws.SetWriteDeadline(time.Now().Add(2 * time.Second))
				if err := ws.WriteJSON(map[string]any{"op": "msg", "id": i, "page": "p", "data": map[string]any{"op": "echo", "v": payload}}); err != nil {
					break // the front closed it
				}
				sent++
			}
			// Another person, on the same worker, is answered every time.
			fast := newBrowser(t, a)
			if code, body := fast.do("GET", "/"); code != http.StatusOK {
				t.Fatalf("loading the site: %d %s", code, body)
			}
			tb := fast.openTab("q")
			for i := 1; i <= 100; i++ {
				ans := tb.send(map[string]any{"op": "inc"})
				if !strings.Contains(string(ans.Data), `"count":`) {
					t.Fatalf("inc %d: %s", i, ans.Data)
				}
			}
			// The front closed the slow socket: with 1013 when the close
			// frame still fits in its buffers, else abruptly (1006): a
			// client that reads nothing cannot be sent anything more.
			_ = ws.SetReadDeadline(time.Now().Add(30 * time.Second))
			var rerr error
			for rerr == nil {
				_, _, rerr = ws.ReadMessage()
			}
			// (A reset is the kernel's answer to a close with our unread
			// messages still in the front's buffers.)
			var ce *websocket.CloseError
			var ne net.Error
			switch {
			case errors.As(rerr, &ce) && (ce.Code == websocket.CloseTryAgainLater || ce.Code == websocket.CloseAbnormalClosure):
			case errors.Is(rerr, syscall.ECONNRESET):
			case errors.As(rerr, &ne) && ne.Timeout():
				t.Fatalf("the slow reader (%d messages sent) was never closed", sent)
			default:
				t.Fatalf("the slow reader (%d messages sent) ended with %v, want the front to close it", sent, rerr)
			}
		})
	}
}
