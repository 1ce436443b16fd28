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
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SetJSONField([]byte(tc.body), tc.key, tc.value)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if !json.Valid(got) {
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
