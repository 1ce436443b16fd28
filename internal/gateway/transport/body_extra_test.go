package transport

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// findExtra reads names with jsontext; it names what decoding the body
// with encoding/json into maps names (the reference below), for bodies
// with extras at the top and in messages, names given twice, escapes,
// text that is not UTF-8 and messages of other shapes.
func TestFindExtraAsEncodingJSON(t *testing.T) {
	reference := func(raw []byte, skip ...string) []string {
		var top map[string]json.RawMessage
		if json.Unmarshal(raw, &top) != nil {
			return nil
		}
		var extra []string
		for k := range top {
			if !chatParams[k] && !contains(skip, k) {
				extra = append(extra, k)
			}
		}
		var msgs []map[string]json.RawMessage
		if json.Unmarshal(top["messages"], &msgs) == nil {
			for i, m := range msgs {
				for k := range m {
					if !messageFields[k] {
						extra = append(extra, fmt.Sprintf("messages[%d].%s", i, k))
					}
				}
			}
		}
		sortStrings(extra)
		return extra
	}
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","prediction":{"type":"content"},"store":true,"messages":[{"role":"user","content":"hi","cache_control":{"type":"x"}},{"role":"assistant","content":"","refusal":null,"audio":{"id":"a"}}]}`,
		`{"zz":1,"model":"m","zz":2,"messages":[{"role":"user","extra":1,"extra":2}]}`,
		`{"mo\u0064el":"m","\u0078":1,"messages":[]}`,
		"{\"a\":\"\xff\",\"messages\":[{\"role\":\"user\",\"b\\u00e9\":\"\xfe\"}]}",
		`{"messages":"not an array","other":[1,{"x":2}]}`,
		`{"messages":[{"role":"user"},"a string",{"k":1}]}`,
		`{"messages":[{"role":"user","x":1}],"messages":[{"role":"user","y":1}]}`,
		`{"background":true,"model":"m","messages":[{"role":"user"}]}`,
		`{}`,
		`[1,2]`,
		`{"truncated":`,
	} {
		for _, skip := range [][]string{nil, {"background"}} {
			got, want := findExtra([]byte(body), skip...), reference([]byte(body), skip...)
			if len(got) == 0 && len(want) == 0 {
				continue
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s (skip %v):\n got  %q\n want %q", body, skip, got, want)
			}
		}
	}
}
