package front

import (
	"encoding/json"
	"reflect"
	"testing"
)

var opSamples = []string{
	`{"op":"open","id":1,"page":"p","kind":"counter"}`,
	`{"op":"msg","id":2,"page":"p","data":{"op":"inc","v":[1,2,{"a":"b\"}"}]},"msg_id":"m-1"}`,
	`{"op":"pull","id":3,"page":"p","after":4,"wait":25000}`,
	` { "op" : "close" , "id" : 4 , "page" : "p" } `,
	`{"op":"msg","id":5,"page":"p","data":"x"}`, `{"op":"msg","id":5,"page":"p","data":12.5e3}`,
	`{"op":"msg","id":5,"page":"p","data":null}`, `{"op":"msg","id":5,"page":"p","data":true}`,
	`{"OP":"msg","Id":6}`, `{"op":"m\u0073g"}`, `{"op":"msg","extra":1}`, `{"id":-1}`, `{"id":1.0}`,
	`{"id":18446744073709551616}`, `{"wait":-5}`, `{"wait":-0}`, `{"id":01}`, `{"op":"é"}`,
	`{"op":"msg"} x`, `{"op":"msg",}`, `{}`, `null`, `[]`, `[ ]`, `{"op":null}`, `{"data":}`,
	`{"data":[1,2}`, `{"data":"unterminated}`, `{"op":"msg","op":"pull"}`, `{"data":1,"data":{"b":2}}`,
	`[{"op":"msg","id":1,"page":"p","data":{}},{"op":"pull","id":2,"page":"p","after":1,"wait":25000}]`,
	`[{"op":"msg"},]`, `[{"op":"msg"} {"op":"pull"}]`, `[{"op":"msg"},{"OP":"x"}]`, `[1]`, `{"data":tru}`,
}

// decodeOp and decodeOps agree with encoding/json on every input: the same
// op, or an error with the same message.
func FuzzDecodeOp(f *testing.F) {
	for _, s := range opSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecodeOp(t, b)
	})
}

func TestDecodeOpAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range opSamples {
		checkDecodeOp(t, []byte(s))
	}
}

func checkDecodeOp(t *testing.T, b []byte) {
	t.Helper()
	var want, got op
	errWant := json.Unmarshal(b, &want)
	errGot := decodeOp(b, &got)
	if errString(errWant) != errString(errGot) || (errWant == nil && !reflect.DeepEqual(want, got)) {
		t.Fatalf("op %q: got %+v (%v), encoding/json %+v (%v)", b, got, errGot, want, errWant)
	}
	var wantOps []op
	errWant = json.Unmarshal(b, &wantOps)
	gotOps, errGot := decodeOps(b)
	if errString(errWant) != errString(errGot) || (errWant == nil && (len(wantOps) != len(gotOps) || len(wantOps) > 0 && !reflect.DeepEqual(wantOps, gotOps))) {
		t.Fatalf("ops %q: got %+v (%v), encoding/json %+v (%v)", b, gotOps, errGot, wantOps, errWant)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// The ops a page sends decode without an allocation but their strings'.
func TestDecodeOpAllocations(t *testing.T) {
	b := []byte(`{"op":"msg","id":2,"page":"p","data":{"op":"inc","v":[1,2]},"msg_id":"m-1"}`)
	var o op
	n := testing.AllocsPerRun(100, func() {
		if err := decodeOp(b, &o); err != nil {
			t.Fatal(err)
		}
	})
	// op, page and msg_id: a string each.
	if n > 3 {
		t.Fatalf("decoding an op allocates %.0f times, want at most 3 (its strings)", n)
	}
}
