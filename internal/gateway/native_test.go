package gateway

import (
	"encoding/json"
	"testing"
)

// SetJSONField changes one member and keeps every other byte: the
// caller's spacing, order, numbers and escapes.
func TestSetJSONField(t *testing.T) {
	for _, tc := range []struct {
		name, body, key string
		value           any
		want            string
	}{
		{"replace", `{"model":"small","n":2}`, "model", "gpt-4o", `{"model":"gpt-4o","n":2}`},
		{"spacing kept", "{ \"a\" : 1.50 ,\n  \"model\" :  \"x\" , \"b\":\"\\u003c\" }", "model", "y", "{ \"a\" : 1.50 ,\n  \"model\" :  \"y\" , \"b\":\"\\u003c\" }"},
		{"nested value", `{"model":{"a":[1,2]},"z":true}`, "model", "m", `{"model":"m","z":true}`},
		{"added", `{"model":"m"}`, "stream_options", map[string]bool{"include_usage": true}, `{"model":"m","stream_options":{"include_usage":true}}`},
		{"added to empty", `{ }`, "k", 1, `{ "k":1}`},
		{"only top level", `{"o":{"model":"inner"},"model":"outer"}`, "model", "new", `{"o":{"model":"inner"},"model":"new"}`},
		// As leniently as encoding/json: a name given twice (the first
		// is the one), text that is not UTF-8 (kept as it was), a name
		// written with escapes.
		{"duplicate name", `{"model":"a","model":"b"}`, "model", "x", `{"model":"x","model":"b"}`},
		{"not UTF-8", "{\"a\":\"\xff\",\"model\":\"m\"}", "model", "x", "{\"a\":\"\xff\",\"model\":\"x\"}"},
		{"escaped name", `{"mo\u0064el":"m"}`, "model", "x", `{"mo\u0064el":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetJSONField([]byte(tc.body), tc.key, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if !json.Valid(got) && tc.name != "not UTF-8" {
				t.Fatalf("invalid JSON %s", got)
			}
		})
	}
	if _, err := SetJSONField([]byte(`[1]`), "k", 1); err == nil {
		t.Fatal("an array was edited")
	}
	if v, ok := JSONField([]byte(`{"a": {"b": 1} , "c":2}`), "a"); !ok || string(v) != `{"b": 1}` {
		t.Fatalf("JSONField = %s %v", v, ok)
	}
	if _, ok := JSONField([]byte(`{"a":1}`), "b"); ok {
		t.Fatal("found a member that is not there")
	}
}

func BenchmarkSetJSONField(b *testing.B) {
	body := []byte(`{"model":"small","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"Say hi, and tell me about the weather in Vilnius today."}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}`)
	for b.Loop() {
		if _, err := SetJSONField(body, "model", "small-v1"); err != nil {
			b.Fatal(err)
		}
	}
}
