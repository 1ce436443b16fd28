package workertest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
	"github.com/stickyd/stickyd/plugins/worker/workertest"
)

// notes is a small app using what the host provides: the store (records
// read into structs, updated under grants), a table its pages subscribe
// to, the gateway, and a backend its "save" op needs.
type notes struct{}

type note struct {
	Text string `json:"text"`
	By   string `json:"by"`
}

func (notes) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := worker.SessionFrom(r.Context())
	if u := r.URL.Query().Get("user"); u != "" {
		s.Login(u)
	}
	fmt.Fprintf(w, "hello %s", s.User())
}

func (notes) OpenPage(ctx context.Context, p *worker.Page) error {
	if err := p.Subscribe("notes"); err != nil {
		return err
	}
	return load(ctx, p)
}

func load(ctx context.Context, p *worker.Page) error {
	var all map[string]note
	if err := worker.GetInto(ctx, "notes", &all); err != nil && !errors.Is(err, worker.ErrNotFound) {
		return err
	}
	return p.Tree().Set("notes", all)
}

func (notes) OnTableChange(ctx context.Context, p *worker.Page, c worker.TableChange) error {
	return load(ctx, p)
}

func (notes) Needs() *worker.Needs { return new(worker.Needs).Op("save", "db-a") }

func (notes) Message(ctx context.Context, p *worker.Page, msg json.RawMessage) (any, error) {
	var m struct{ Op, ID, Text string }
	if err := json.Unmarshal(msg, &m); err != nil {
		return nil, err
	}
	switch m.Op {
	case "add", "save":
		path := "notes/" + m.ID
		err := worker.Update(ctx, []string{path}, func(cur worker.Values) (map[string]any, []string, error) {
			if len(cur) > 0 {
				return nil, nil, &worker.Refusal{Code: "taken", Message: m.ID + " is taken"}
			}
			return map[string]any{path: note{Text: m.Text, By: p.Session().User()}}, nil, nil
		})
		if err != nil {
			return nil, err
		}
		return m.ID, worker.Publish(ctx, "notes", m.ID)
	case "ask":
		r, err := p.Gateway().Complete(ctx, worker.GatewayRequest{Model: "chat", Messages: []worker.GatewayMessage{{Role: "user", Content: m.Text}}})
		if err != nil {
			return nil, err
		}
		return r.Content, p.Tree().Set("answer", r.Content)
	}
	return nil, fmt.Errorf("unknown op %q", m.Op)
}

func TestNotesWithoutAnAgent(t *testing.T) {
	h := workertest.New(t, notes{}, workertest.Workers(2))
	if err := h.Store.Set("notes/seed", note{Text: "from the seed", By: "ops"}); err != nil {
		t.Fatal(err)
	}
	ana, bob := h.Person("ana"), h.Person("bob") // on two workers
	at, bt := ana.Open("notes"), bob.Open("notes")
	if got := at.Get("notes/seed/text"); got != "from the seed" {
		t.Fatalf("a page opened over the seeded store: %v", at.Tree())
	}
	if _, err := at.Send(map[string]any{"op": "add", "id": "n1", "text": "hi"}); err != nil {
		t.Fatal(err)
	}
	// The store has the record; bob's page, on the other worker, heard of it.
	var n note
	if err := h.Store.Decode("notes/n1", &n); err != nil || n != (note{Text: "hi", By: "ana"}) {
		t.Fatalf("the store after the add: %+v %v", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for bt.Get("notes/n1/text") != "hi" {
		if time.Now().After(deadline) {
			t.Fatalf("bob's page never saw ana's note: %v", bt.Tree())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A refusal carries its code.
	_, err := bt.Send(map[string]any{"op": "add", "id": "n1", "text": "again"})
	var re *workertest.Error
	if !errors.As(err, &re) || re.Code != "taken" {
		t.Fatalf("adding a taken id: %v", err)
	}
	// The gateway answers with the test's model.
	h.Model("chat", func(r worker.GatewayRequest) (worker.GatewayResponse, error) {
		return worker.GatewayResponse{Content: "echo: " + r.Messages[0].Content}, nil
	})
	if a, err := at.Send(map[string]any{"op": "ask", "text": "ping"}); err != nil || string(a) != `"echo: ping"` || at.Get("answer") != "echo: ping" {
		t.Fatalf("asking the model: %s %v %v", a, err, at.Tree())
	}
	// A save needs db-a: it waits while db-a is in maintenance.
	h.Maintenance("db-a", true)
	done := make(chan error, 1)
	go func() { _, err := at.Send(map[string]any{"op": "save", "id": "n2", "text": "held"}); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a save answered during db-a's window: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	h.Maintenance("db-a", false)
	if err := <-done; err != nil {
		t.Fatalf("the held save: %v", err)
	}
	// A site request, with the app's login.
	p := h.Person("")
	resp, err := p.Do("GET", "/?user=cy", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "hello cy" || p.User() != "cy" {
		t.Fatalf("a site request: %d %q as %q", resp.StatusCode, body, p.User())
	}
}
