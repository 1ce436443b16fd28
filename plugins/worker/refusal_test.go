package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// refuseApp refuses every message, with the error its text names.
type refuseApp struct{ testApp }

func (refuseApp) Message(ctx context.Context, p *Page, msg json.RawMessage) (any, error) {
	switch string(msg) {
	case `"sold_out"`:
		return nil, fmt.Errorf("ordering: %w", &Refusal{Code: "sold_out", Message: "the last one just went", Retry: true})
	case `"too_big"`:
		return nil, p.Tree().Set("x", make([]byte, 2<<20))
	default:
		return nil, errors.New("no such op")
	}
}

// A Message's error reaches the page with its code and retry: a Refusal's
// own (wrapped or not), "state_too_large" for a write past the page's bound,
// none (the front says "refused") for any other; a resend of the same
// msg_id is answered the same from memory.
func TestRefusalCarriesCodeAndRetry(t *testing.T) {
	h := startAppWith(t, refuseApp{}, "w1", Options{Name: "test", MaxPageBytes: 1 << 20})
	conn := h.get("", "", "/").Identity.Conn
	u := "~" + conn
	if _, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Open{Open: &protocol.PageOpen{Page: "p", Kind: "k"}}}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		data, code, error string
		retry             bool
	}{
		{`"sold_out"`, "sold_out", "ordering: the last one just went", true},
		{`"too_big"`, "state_too_large", "", false},
		{`"other"`, "", "no such op", false},
	} {
		t.Run(tc.data, func(t *testing.T) {
			for range 2 { // the second is answered from memory
				r, err := h.frame(&protocol.Frame{User: u, Conn: conn, Kind: &protocol.Frame_Message{Message: &protocol.PageMessage{Page: "p", Data: []byte(tc.data), MsgId: tc.data}}})
				if err != nil {
					t.Fatal(err)
				}
				m := r.GetMessage()
				if m.GetCode() != tc.code || m.GetRetry() != tc.retry || m.GetError() == "" || tc.error != "" && m.GetError() != tc.error {
					t.Fatalf("refused with %+v, want code %q retry %v error %q", m, tc.code, tc.retry, tc.error)
				}
			}
		})
	}
}
