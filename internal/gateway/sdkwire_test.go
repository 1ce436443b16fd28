package gateway

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the SDK's testdata/gateway/response.json and chunk.json, what the gateway answers")

// sdkGolden is the folder of the gateway's JSON as the Go SDK keeps it, in
// the SDK's own module (which cannot import this package).
var sdkGolden = filepath.Join("..", "..", "plugins", "worker", "testdata", "gateway")

// The gateway reads the call the SDK sends (call.json, written by the SDK's
// TestGatewayWireMatchesTheGateway) and writes the answers the SDK reads
// (response.json and chunk.json, -update rewrites them): a field renamed
// on either side fails one of the two tests.
func TestGatewayWireMatchesTheSDK(t *testing.T) {
	temp := 0.5
	deadline := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var call Call
	if err := json.Unmarshal(readSDKGolden(t, "call.json"), &call); err != nil {
		t.Fatal(err)
	}
	want := Call{Request: Request{Model: "small", Messages: []Message{{Role: "user", Content: "hi"}}, MaxTokens: 9,
		Temperature: &temp}, IdempotencyKey: "k", Deadline: deadline}
	if !reflect.DeepEqual(call, want) {
		t.Fatalf("call %+v, want %+v", call, want)
	}
	u := Usage{Input: 1, CachedInput: 2, CacheWrite: 3, Output: 4}
	for name, v := range map[string]any{
		"response.json": Response{ID: "i", Model: "m", Content: "c", FinishReason: "stop", Usage: u, Provider: "p", Deployment: "d", CostMicros: 5},
		"chunk.json":    Chunk{Delta: "x", Done: true, FinishReason: "stop", Usage: &u, Provider: "p", Deployment: "d", CostMicros: 6},
	} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			var out bytes.Buffer
			_ = json.Indent(&out, b, "", "  ")
			out.WriteByte('\n')
			if err := os.WriteFile(filepath.Join(sdkGolden, name), out.Bytes(), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if want := readSDKGolden(t, name); !bytes.Equal(b, want) {
			t.Errorf("%s: the gateway writes %s, the SDK reads %s", name, b, want)
		}
	}
}

// readSDKGolden is the SDK's testdata/gateway/name, compacted.
func readSDKGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sdkGolden, name))
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out.Bytes()
}
