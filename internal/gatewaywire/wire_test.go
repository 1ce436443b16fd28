package gatewaywire

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The documents below were encoded by internal/gateway before these types
// moved here. The raft log and snapshots hold them as JSON, so an entry
// written then must decode to the same value now, and the same value must
// encode to the same bytes.
const (
	jobDoneJSON   = `{"id":"j1","state":"done","model":"gpt","session":"alice","submitted":"2026-03-14T09:26:53.589793Z","finished":"2026-03-14T09:26:55.089793Z","response":{"id":"resp-1","model":"gpt-4o","content":"hello","finish_reason":"stop","usage":{"input_tokens":10,"cached_input_tokens":2,"cache_write_tokens":3,"output_tokens":7},"provider":"openai","deployment":"east","cost_micros":123,"latency_ns":250000000}}`
	jobFailedJSON = `{"id":"j2","state":"failed","model":"claude","session":"bob","submitted":"2026-03-14T09:26:53.589793Z","finished":"2026-03-14T09:26:54.589793Z","error":"budget exceeded","error_kind":"budget_exceeded"}`
	countersJSON  = `{"sessions":{"alice":{"micros":123,"calls":1,"usage":{"input_tokens":10,"cached_input_tokens":2,"cache_write_tokens":3,"output_tokens":7}}},"keys":{"ci":{"micros":5,"calls":2,"usage":{"input_tokens":1,"cached_input_tokens":0,"output_tokens":1}}},"days":{"2026-03-14":{"micros":128,"calls":3,"usage":{"input_tokens":11,"cached_input_tokens":2,"cache_write_tokens":3,"output_tokens":8}}},"total":{"micros":128,"calls":3,"usage":{"input_tokens":11,"cached_input_tokens":2,"cache_write_tokens":3,"output_tokens":8}}}`
	emptyCounters = `{"sessions":null,"days":null,"total":{"micros":0,"calls":0,"usage":{"input_tokens":0,"cached_input_tokens":0,"output_tokens":0}}}`
	callJSON      = `{"request":{"model":"gpt","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":64,"temperature":0.5,"stop":["\n"],"user":"u1"},"session":"alice","key":"ci","idempotency_key":"idem-1","deadline":"2026-03-14T09:27:53.589793Z"}`
	emptyCallJSON = `{"request":{"model":"","messages":null},"session":""}`
	chargeJSON    = `{"request":"idem-1","session":"alice","key":"ci","day":"2026-03-14","model":"gpt","deployment":"east","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":7},"micros":123}`
)

func TestJSONAsBefore(t *testing.T) {
	sub := time.Date(2026, 3, 14, 9, 26, 53, 589793000, time.UTC)
	temp := 0.5
	both := Usage{Input: 11, CachedInput: 2, CacheWrite: 3, Output: 8}
	tests := []struct {
		name string
		doc  string
		want any
	}{
		{"job done", jobDoneJSON, Job{ID: "j1", State: JobDone, Model: "gpt", Session: "alice", Submitted: sub, Finished: sub.Add(1500 * time.Millisecond),
			Response: &Response{ID: "resp-1", Model: "gpt-4o", Content: "hello", FinishReason: "stop",
				Usage: Usage{Input: 10, CachedInput: 2, CacheWrite: 3, Output: 7}, Provider: "openai", Deployment: "east", CostMicros: 123, Latency: 250 * time.Millisecond}}},
		{"job failed", jobFailedJSON, Job{ID: "j2", State: JobFailed, Model: "claude", Session: "bob", Submitted: sub, Finished: sub.Add(time.Second),
			Error: "budget exceeded", ErrorKind: "budget_exceeded"}},
		{"counters", countersJSON, Counters{
			Sessions: map[string]Tally{"alice": {Micros: 123, Calls: 1, Usage: Usage{Input: 10, CachedInput: 2, CacheWrite: 3, Output: 7}}},
			Keys:     map[string]Tally{"ci": {Micros: 5, Calls: 2, Usage: Usage{Input: 1, Output: 1}}},
			Days:     map[string]Tally{"2026-03-14": {Micros: 128, Calls: 3, Usage: both}},
			Total:    Tally{Micros: 128, Calls: 3, Usage: both}}},
		{"empty counters", emptyCounters, Counters{}},
		{"call", callJSON, Call{Request: Request{Model: "gpt", Messages: []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}},
			MaxTokens: 64, Temperature: &temp, Stop: []string{"\n"}, User: "u1"},
			Session: "alice", Key: "ci", IdempotencyKey: "idem-1", Deadline: sub.Add(time.Minute)}},
		{"empty call", emptyCallJSON, Call{}},
		{"charge", chargeJSON, Charge{Request: "idem-1", Session: "alice", Key: "ci", Day: "2026-03-14", Model: "gpt", Deployment: "east",
			Usage: Usage{Input: 10, Output: 7}, Micros: 123}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Decode the old document into a fresh value of want's type.
			got := reflect.New(reflect.TypeOf(tt.want))
			if err := json.Unmarshal([]byte(tt.doc), got.Interface()); err != nil {
				t.Fatalf("decoding: %v", err)
			}
			if !reflect.DeepEqual(got.Elem().Interface(), tt.want) {
				t.Fatalf("decoded %+v, want %+v", got.Elem().Interface(), tt.want)
			}
			b, err := json.Marshal(tt.want)
			if err != nil {
				t.Fatalf("encoding: %v", err)
			}
			if string(b) != tt.doc {
				t.Fatalf("encoded\n%s\nwant\n%s", b, tt.doc)
			}
		})
	}
}

// TestRoundTrip checks that a Job and Counters come back from JSON as they
// went in, as a snapshot restored on another node must.
func TestRoundTrip(t *testing.T) {
	var c Counters
	c.Apply(Charge{Request: "r1", Session: "s", Key: "k", Day: "2026-03-14", Micros: 7, Usage: Usage{Input: 3, CacheWrite: 1, Output: 2}})
	c.Apply(Charge{Request: "r2", Session: "s", Day: "2026-03-15", Micros: 5, Usage: Usage{CachedInput: 4}})
	j := Job{ID: "j", State: JobQueued, Model: "m", Session: "s", Submitted: time.Date(2026, 3, 14, 1, 2, 3, 4, time.UTC)}
	for _, v := range []any{&c, &j} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		back := reflect.New(reflect.TypeOf(v).Elem())
		if err := json.Unmarshal(b, back.Interface()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Interface(), v) {
			t.Fatalf("%T: got %+v back, want %+v", v, back.Interface(), v)
		}
	}
	if s := c.Spent("s", "2026-03-14", "k"); s != (Spend{Session: 12, Day: 7, Key: 7}) {
		t.Fatalf("Spent = %+v", s)
	}
}
