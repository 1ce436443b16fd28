package front

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/stickyd/stickyd/internal/placement"
	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The hand-written encoder gives what json.Marshal of the answer gives,
// value for value.
func TestAppendReplyMatchesJSON(t *testing.T) {
	for _, rep := range []*protocol.FrameReply{
		{WorkerId: "w1", Kind: &protocol.FrameReply_Opened{Opened: &protocol.PageState{Page: "p<1>", Kind: "grid", Seq: 7, Base: 3, Resync: true, Notice: "restarted \"clean\""}}},
		{WorkerId: "w-é", Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Data: []byte(`{"a":[1,2,{"b":"x\"y"}],"c":null}`)}}},
		{Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Error: "no\nsuch row & <tag>"}}},
		{Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Error: "sold out", Code: "sold_out", Retry: true}}},
		{Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{}}},
		{WorkerId: "w1", Kind: &protocol.FrameReply_Deltas{Deltas: &protocol.Deltas{Last: 12, Deltas: []*protocol.Delta{
			{Seq: 10, Op: protocol.Delta_SET, Path: "rows/3/qty", Value: []byte("42")},
			{Seq: 11, Op: protocol.Delta_SET, Path: "draft", Value: []byte(`"xx\u00e9"`)},
			{Seq: 12, Op: protocol.Delta_DELETE, Path: "gone"},
			{Seq: 13, Op: protocol.Delta_RESET, Value: []byte(`{"k": [true, false]}`), Notice: "the page restarted"},
		}}}},
		{WorkerId: "w1", Kind: &protocol.FrameReply_Deltas{Deltas: &protocol.Deltas{Last: 4}}},
	} {
		want, err := json.Marshal(toAnswer(9, rep))
		if err != nil {
			t.Fatal(err)
		}
		got, bad := appendReply(nil, 9, rep)
		if bad {
			t.Fatalf("%s: a good value taken for a bad one", got)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: not JSON: %v", got, err)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("appendReply wrote\n%s\njson.Marshal writes\n%s", got, want)
		}
	}
	// A worker's bug is not passed on as a broken frame.
	got, bad := appendReply(nil, 1, &protocol.FrameReply{Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Data: []byte(`{"a":`)}}})
	if !bad || !json.Valid(got) {
		t.Fatalf("a value that is not JSON: bad %v, wrote %s", bad, got)
	}
}

// pullWorker holds a page's pull and answers it, when a message comes, in
// one batch with the message's reply, as the SDK does.
type pullWorker struct {
	client *channel.Peer
}

func newPullWorker(t *testing.T) *pullWorker {
	a, b := channel.Pipe()
	var srv *channel.Peer
	var mu sync.Mutex
	var waiting uint64
	seq := uint64(0)
	srv = channel.NewIdlePeer(b, func(env *protocol.Envelope) {
		fr := env.GetFrame()
		mu.Lock()
		defer mu.Unlock()
		switch k := fr.Kind.(type) {
		case *protocol.Frame_Pull:
			waiting = env.Id
		case *protocol.Frame_Message:
			seq++
			reply := &protocol.Envelope{Id: env.Id, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{WorkerId: "w1",
				Kind: &protocol.FrameReply_Message{Message: &protocol.MessageResult{Data: k.Message.Data}}}}}
			if waiting == 0 {
				_ = srv.SendTogether(reply)
				return
			}
			pulled := &protocol.Envelope{Id: waiting, Reply: true, Body: &protocol.Envelope_FrameReply{FrameReply: &protocol.FrameReply{WorkerId: "w1", More: true,
				Kind: &protocol.FrameReply_Deltas{Deltas: &protocol.Deltas{Page: "p", Last: seq, Deltas: []*protocol.Delta{{Seq: seq, Op: protocol.Delta_SET, Path: "n", Value: []byte("1")}}}}}}}
			waiting = 0
			_ = srv.SendTogether(pulled, reply)
		}
	})
	srv.EnableBatches()
	srv.Listen()
	w := &pullWorker{client: channel.NewPeer(a, nil)}
	t.Cleanup(func() { _ = w.client.Close(); _ = srv.Close() })
	return w
}

func (w *pullWorker) Send(_ context.Context, _ string, f *protocol.Frame) (*channel.Call, error) {
	return w.client.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
}

// A page that asks for batches (?batch=1) is told so first, may send its
// ops as one array, and gets a message's woken pull and its reply in one
// frame, the pull's answer first. A page that did not ask gets them in two
// frames, in the same order.
func TestBatchedFrames(t *testing.T) {
	w := newPullWorker(t)
	f, err := New(Config{Dispatcher: w, CookieKeys: [][]byte{[]byte(keyA)},
		Directory: &mapDir{routes: map[string]placement.Route{"c1": {Conn: "c1", User: "u1", Worker: "w1", Epoch: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(func() { f.Close(); srv.Close() })
	dial := func(query string) *websocket.Conn {
		h := http.Header{"Cookie": {"stickyd_conn=" + f.ring().sign("c1", f.userOf("c1"), time.Now())}}
		ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+Prefix+"ws"+query, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ws.Close() })
		_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		return ws
	}
	read := func(ws *websocket.Conn) string {
		t.Helper()
		_, b, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	pull := `{"op":"pull","id":1,"page":"p","after":0,"wait":5000}`
	msg := `{"op":"msg","id":2,"page":"p","msg_id":"m1","data":{"v":1}}`

	ws := dial("?batch=1")
	if got := read(ws); got != `{"op":"hello","batch":true,"max_message_bytes":1048576}` {
		t.Fatalf("first frame %s, want the hello with the front's message limit", got)
	}
	if err := ws.WriteMessage(websocket.TextMessage, []byte("["+pull+","+msg+"]")); err != nil {
		t.Fatal(err)
	}
	var both []answer
	if frame := read(ws); json.Unmarshal([]byte(frame), &both) != nil || len(both) != 2 {
		t.Fatalf("got %s, want the pull's answer and the reply in one array", frame)
	}
	if both[0].ID != 1 || len(both[0].Deltas) != 1 || both[0].Last != 1 || both[1].ID != 2 || string(both[1].Data) != `{"v":1}` {
		t.Fatalf("answers %+v", both)
	}
	// More ops than a frame may hold are refused, and none runs.
	ops := strings.Repeat(msg+",", maxBatchOps) + msg
	if err := ws.WriteMessage(websocket.TextMessage, []byte("["+ops+"]")); err != nil {
		t.Fatal(err)
	}
	var refusal answer
	if frame := read(ws); json.Unmarshal([]byte(frame), &refusal) != nil || refusal.Code != "bad_request" {
		t.Fatalf("a frame of %d ops answered %s", maxBatchOps+1, frame)
	}

	plain := dial("")
	for _, op := range []string{pull, msg} {
		if err := plain.WriteMessage(websocket.TextMessage, []byte(op)); err != nil {
			t.Fatal(err)
		}
	}
	var first, second answer
	if err := json.Unmarshal([]byte(read(plain)), &first); err != nil || first.ID != 1 || len(first.Deltas) != 1 {
		t.Fatalf("first frame: %+v %v, want the pull's answer", first, err)
	}
	if err := json.Unmarshal([]byte(read(plain)), &second); err != nil || second.ID != 2 {
		t.Fatalf("second frame: %+v %v, want the reply", second, err)
	}
	// An array from a page that did not ask is not read as ops.
	if err := plain.WriteMessage(websocket.TextMessage, []byte("["+msg+"]")); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(read(plain)), &refusal); err != nil || refusal.Code != "bad_request" {
		t.Fatalf("an array on a plain socket: %+v %v", refusal, err)
	}
}
