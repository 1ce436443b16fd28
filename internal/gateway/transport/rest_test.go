package transport

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/gateway"
)

var answered = gateway.Response{ID: "resp-1", Model: "gpt-test-2025", Content: "hi there", FinishReason: "stop",
	Usage: gateway.Usage{Input: 7, CachedInput: 3, Output: 2}, Provider: "openai", Deployment: "openai-east", CostMicros: 42}

func TestSubmit(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered}})
	srv := newHTTP(t, svc, HTTPOptions{})

	body := map[string]any{"model": "m", "messages": hello, "max_tokens": 50, "temperature": 0, "stop": "END", "session": "sess-1"}
	resp, out := do(t, http.MethodPost, srv.URL+"/v1/gateway/requests", body, map[string]string{"Idempotency-Key": "key-1"})
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	var got submitted
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := submitted{ID: "job-1", State: gateway.JobQueued, Links: submittedLinks{
		Self: "/v1/gateway/requests/job-1", Wait: "/v1/gateway/requests/job-1?wait=30s", Cancel: "/v1/gateway/requests/job-1"}}
	if got != want {
		t.Fatalf("answer %+v, want %+v", got, want)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/gateway/requests/job-1" {
		t.Fatalf("Location %q", loc)
	}
	call := svc.lastCall(t)
	if call.Session != "sess-1" || call.IdempotencyKey != "key-1" {
		t.Fatalf("session %q, idempotency key %q", call.Session, call.IdempotencyKey)
	}
	req := call.Request
	if req.Model != "m" || req.MaxTokens != 50 || req.Temperature == nil || *req.Temperature != 0 ||
		len(req.Stop) != 1 || req.Stop[0] != "END" || len(req.Messages) != 1 || !reflect.DeepEqual(req.Messages[0], hello[0]) {
		t.Fatalf("request %+v", req)
	}
}

// TestSession checks who pays: the body's session, the header, the user,
// then the authenticated caller; a session an API key's caller names is
// under the key's name, so no key spends another's sessions.
func TestSession(t *testing.T) {
	auth := func(r *http.Request) (string, error) {
		if r.Header.Get("Authorization") != "Bearer sk-team" {
			return "", errors.New("unknown API key")
		}
		return "team-key", nil
	}
	tests := []struct {
		name   string
		body   map[string]any
		header map[string]string
		want   string
	}{
		{"body", map[string]any{"session": "s-body", "user": "u"}, map[string]string{SessionHeader: "s-header"}, "team-key/s-body"},
		{"header", map[string]any{"user": "u"}, map[string]string{SessionHeader: "s-header"}, "team-key/s-header"},
		{"user", map[string]any{"user": "u"}, nil, "team-key/u"},
		{"api key", map[string]any{}, nil, "team-key"},
		{"another key's session", map[string]any{}, map[string]string{SessionHeader: "other-key/maria"}, "team-key/other-key/maria"},
		{"its own session, named", map[string]any{}, map[string]string{SessionHeader: "team-key/maria"}, "team-key/maria"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := newFake(map[string]script{"m": {resp: answered}})
			srv := newHTTP(t, svc, HTTPOptions{Auth: auth})
			tt.body["model"], tt.body["messages"] = "m", hello
			header := map[string]string{"Authorization": "Bearer sk-team"}
			for k, v := range tt.header {
				header[k] = v
			}
			resp, out := do(t, http.MethodPost, srv.URL+"/v1/gateway/requests", tt.body, header)
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			if got := svc.lastCall(t).Session; got != tt.want {
				t.Fatalf("session %q, want %q", got, tt.want)
			}
			// The same session on the OpenAI route (which has no body session).
			delete(tt.body, "session")
			resp, out = do(t, http.MethodPost, srv.URL+"/v1/chat/completions", tt.body, header)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %s", resp.StatusCode, out)
			}
			want := tt.want
			if tt.name == "body" {
				want = "team-key/s-header"
			}
			if got := svc.lastCall(t).Session; got != want {
				t.Fatalf("chat session %q, want %q", got, want)
			}
		})
	}

	t.Run("refused", func(t *testing.T) {
		svc := newFake(map[string]script{"m": {resp: answered}})
		srv := newHTTP(t, svc, HTTPOptions{Auth: auth})
		resp, out := do(t, http.MethodPost, srv.URL+"/v1/chat/completions",
			map[string]any{"model": "m", "messages": hello}, map[string]string{"Authorization": "Bearer nope"})
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("status %d: %s", resp.StatusCode, out)
		}
		if e := errorOf(t, out); e.Message != "unknown API key" || e.Code != "invalid_api_key" {
			t.Fatalf("error %+v", e)
		}
		if n := svc.count("Complete"); n != 0 {
			t.Fatalf("the service was called %d times", n)
		}
	})
}

func TestBadInput(t *testing.T) {
	tests := []struct {
		name, path, body string
		status           int
		param            string
	}{
		{"malformed", "/v1/gateway/requests", `{"model": "m",`, 400, ""},
		{"trailing", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":"x"}]} {}`, 400, ""},
		{"no model", "/v1/gateway/requests", `{"messages": [{"role":"user","content":"x"}]}`, 400, "model"},
		{"no messages", "/v1/chat/completions", `{"model": "m"}`, 400, "messages"},
		{"empty messages", "/v1/chat/completions", `{"model": "m", "messages": []}`, 400, "messages"},
		{"tool without call", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"tool","content":"x"}]}`, 400, "messages[0].tool_call_id"},
		{"function role", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"function","content":"x"}]}`, 400, "messages[0].role"},
		{"wrong type", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":"x"}], "max_tokens": "ten"}`, 400, "max_tokens"},
		{"negative max", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":"x"}], "max_completion_tokens": -1}`, 400, "max_completion_tokens"},
		{"image without url", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":[{"type":"image_url"}]}]}`, 400, "messages[0].content[0].image_url"},
		{"n", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":"x"}], "n": 0}`, 400, "n"},
		{"tool choice", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":"x"}], "tool_choice": "sometimes"}`, 400, "tool_choice"},
		{"format", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":"x"}], "response_format": {"type":"yaml"}}`, 400, "response_format.type"},
		{"async stream", "/v1/gateway/requests", `{"model": "m", "messages": [{"role":"user","content":"x"}], "stream": true}`, 400, "stream"},
		{"too large", "/v1/chat/completions", `{"model": "m", "messages": [{"role":"user","content":"` + strings.Repeat("x", 300) + `"}]}`, 413, ""},
		{"unknown model", "/v1/gateway/requests", `{"model": "nope", "messages": [{"role":"user","content":"x"}]}`, 404, "model"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc := newFake(map[string]script{"m": {resp: answered}})
			srv := newHTTP(t, svc, HTTPOptions{MaxBodyBytes: 256})
			resp, out := do(t, http.MethodPost, srv.URL+tt.path, tt.body, nil)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.status, out)
			}
			e := errorOf(t, out)
			if got := ""; e.Param != nil {
				got = *e.Param
				if got != tt.param {
					t.Fatalf("param %q, want %q (%s)", got, tt.param, out)
				}
			} else if tt.param != "" {
				t.Fatalf("no param, want %q (%s)", tt.param, out)
			}
			if tt.status == 400 && svc.count("Complete")+svc.count("Submit") != 0 {
				t.Fatal("a refused request reached the service")
			}
		})
	}
}

func TestRoutes(t *testing.T) {
	srv := newHTTP(t, newFake(nil), HTTPOptions{})
	resp, out := do(t, http.MethodGet, srv.URL+"/v1/chat/completions", nil, nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "POST" {
		t.Fatalf("status %d, Allow %q: %s", resp.StatusCode, resp.Header.Get("Allow"), out)
	}
	errorOf(t, out)
	resp, out = do(t, http.MethodPut, srv.URL+"/v1/gateway/requests/x", nil, nil)
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, DELETE" {
		t.Fatalf("status %d, Allow %q: %s", resp.StatusCode, resp.Header.Get("Allow"), out)
	}
	resp, out = do(t, http.MethodGet, srv.URL+"/v1/nothing", nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	errorOf(t, out)
}

func submitOne(t *testing.T, url string) string {
	t.Helper()
	resp, out := do(t, http.MethodPost, url+"/v1/gateway/requests", map[string]any{"model": "m", "messages": hello}, nil)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	var s submitted
	if err := json.Unmarshal(out, &s); err != nil {
		t.Fatal(err)
	}
	return s.ID
}

func getJob(t *testing.T, url string) (int, gateway.Job, []byte) {
	t.Helper()
	resp, out := do(t, http.MethodGet, url, nil, nil)
	var j gateway.Job
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(out, &j); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, j, out
}

func TestGetJob(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered}})
	srv := newHTTP(t, svc, HTTPOptions{})
	id := submitOne(t, srv.URL)

	status, j, out := getJob(t, srv.URL+"/v1/gateway/requests/"+id)
	if status != http.StatusOK || j.ID != id || j.State != gateway.JobQueued || j.Model != "m" {
		t.Fatalf("status %d: %s", status, out)
	}
	svc.finish(id, gateway.JobDone, &answered)
	status, j, out = getJob(t, srv.URL+"/v1/gateway/requests/"+id)
	if status != http.StatusOK || j.State != gateway.JobDone || j.Response == nil || j.Response.Content != "hi there" {
		t.Fatalf("status %d: %s", status, out)
	}

	status, _, out = getJob(t, srv.URL+"/v1/gateway/requests/nope")
	if status != http.StatusNotFound {
		t.Fatalf("status %d: %s", status, out)
	}
	if e := errorOf(t, out); e.Code != "request_not_found" {
		t.Fatalf("error %+v", e)
	}
	for _, bad := range []string{"abc", "-1s"} {
		status, _, out = getJob(t, srv.URL+"/v1/gateway/requests/"+id+"?wait="+bad)
		if status != http.StatusBadRequest {
			t.Fatalf("wait=%s: status %d: %s", bad, status, out)
		}
	}
}

// TestLongPoll checks ?wait= both ways: by polling Job, and through the
// Service's Wait.
func TestLongPoll(t *testing.T) {
	for _, waiter := range []bool{false, true} {
		name := map[bool]string{false: "polling", true: "waiter"}[waiter]
		t.Run(name, func(t *testing.T) {
			fake := newFake(map[string]script{"m": {resp: answered}})
			var svc gateway.Service = fake
			if waiter {
				svc = waitingService{fake}
			}
			srv := newHTTP(t, svc, HTTPOptions{})
			id := submitOne(t, srv.URL)

			// Ends in time: the answer comes when the job ends.
			reads := fake.count("Job")
			type result struct {
				status int
				job    gateway.Job
				body   []byte
			}
			got := make(chan result, 1)
			go func() {
				// No t.Fatal off the test's goroutine: the test reads r.
				var r result
				resp, err := http.Get(srv.URL + "/v1/gateway/requests/" + id + "?wait=10s")
				if err == nil {
					defer resp.Body.Close()
					r.status = resp.StatusCode
					r.body, _ = io.ReadAll(resp.Body)
					_ = json.Unmarshal(r.body, &r.job)
				}
				got <- r
			}()
			waitFor(t, "the long poll to start", func() bool {
				return fake.count("Job") > reads || fake.count("Wait") > 0
			})
			fake.finish(id, gateway.JobDone, &answered)
			r := <-got
			if r.status != http.StatusOK || r.job.State != gateway.JobDone {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			if waiter && fake.count("Wait") != 1 {
				t.Fatalf("Wait called %d times", fake.count("Wait"))
			}

			// Does not end in time: the job as it is.
			id2 := submitOne(t, srv.URL)
			start := time.Now()
			status, j, out := getJob(t, srv.URL+"/v1/gateway/requests/"+id2+"?wait=50ms")
			if status != http.StatusOK || j.State != gateway.JobQueued {
				t.Fatalf("status %d: %s", status, out)
			}
			if waited := time.Since(start); waited < 50*time.Millisecond {
				t.Fatalf("answered after %s, before the wait", waited)
			}

			status, _, out = getJob(t, srv.URL+"/v1/gateway/requests/nope?wait=1s")
			if status != http.StatusNotFound {
				t.Fatalf("status %d: %s", status, out)
			}
		})
	}
}

func TestParseWait(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true},
		{"10s", 10 * time.Second, true},
		{"10", 10 * time.Second, true},
		{"1500ms", 1500 * time.Millisecond, true},
		{"2m", maxWait, true},
		{"3600", maxWait, true},
		{"-1s", 0, false},
		{"soon", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseWait(tt.in)
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("parseWait(%q) = %s, %v; want %s, ok %v", tt.in, got, err, tt.want, tt.ok)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	svc := newFake(map[string]script{"m": {resp: answered}})
	srv := newHTTP(t, svc, HTTPOptions{})

	id := submitOne(t, srv.URL)
	resp, out := do(t, http.MethodDelete, srv.URL+"/v1/gateway/requests/"+id, nil, nil)
	var j gateway.Job
	if err := json.Unmarshal(out, &j); err != nil || resp.StatusCode != http.StatusOK || j.State != gateway.JobCancelled {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
	if n := svc.count("Cancel"); n != 1 {
		t.Fatalf("Cancel called %d times", n)
	}

	// Cancelled already, and done: 409.
	done := submitOne(t, srv.URL)
	svc.finish(done, gateway.JobDone, &answered)
	for _, id := range []string{id, done} {
		resp, out = do(t, http.MethodDelete, srv.URL+"/v1/gateway/requests/"+id, nil, nil)
		if resp.StatusCode != http.StatusConflict {
			t.Fatalf("%s: status %d: %s", id, resp.StatusCode, out)
		}
		if e := errorOf(t, out); e.Code != "already_finished" {
			t.Fatalf("error %+v", e)
		}
	}
	if n := svc.count("Cancel"); n != 1 {
		t.Fatalf("Cancel called %d times", n)
	}

	resp, out = do(t, http.MethodDelete, srv.URL+"/v1/gateway/requests/nope", nil, nil)
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
}
