package gateway

import (
	"testing"
	"time"
)

// A deployment readmitted after a good health check is on trial: its next
// failure degrades it again at once, and each failed trial doubles the
// wait before the next readmission; a success ends the trial. So one that
// answers its health check while its calls fail is not readmitted every
// probe (it was 3 times in 12 s, taking 35 calls).
func TestReadmissionBacksOff(t *testing.T) {
	h := &health{cfg: HealthConfig{MinRequests: 1, MaxErrorRatio: 0.5, ProbeInterval: 5 * time.Second}.withDefaults()}
	t0 := time.Unix(1_800_000_000, 0)
	fail := &ProviderError{Kind: KindServer, Status: 500}
	if !h.record(t0, fail) {
		t.Fatal("not degraded by its failure")
	}
	at := t0
	for strike, wait := range []time.Duration{5 * time.Second, 10 * time.Second, 20 * time.Second, 40 * time.Second} {
		if h.readmit(at.Add(wait - time.Millisecond)) {
			t.Fatalf("strike %d: readmitted before %s", strike, wait)
		}
		at = at.Add(wait)
		if !h.readmit(at) {
			t.Fatalf("strike %d: not readmitted after %s", strike, wait)
		}
		// One failure on trial, whatever the window's minimum, and it is
		// out again.
		if !h.record(at, fail) || !h.isDegraded() {
			t.Fatalf("strike %d: a failure on trial did not degrade it", strike)
		}
	}
	at = at.Add(80 * time.Second)
	if !h.readmit(at) || h.record(at, nil) || h.isDegraded() {
		t.Fatal("a success on trial")
	}
	// The trial over, the backoff starts anew.
	if h.strikes != 0 || h.trial {
		t.Fatalf("after a good trial: %d strikes, trial %v", h.strikes, h.trial)
	}
}

// Streams that fail midway three times in a row degrade the deployment,
// though the window has not its minimum of outcomes; a stream that ends
// well resets the count.
func TestStreamCutsDegrade(t *testing.T) {
	h := &health{cfg: HealthConfig{MinRequests: 100}.withDefaults()}
	now := time.Unix(1_800_000_000, 0)
	cut := &ProviderError{Kind: KindServer, Message: "cut"}
	h.recordCut(now, cut)
	h.recordCut(now, cut)
	h.record(now, nil)
	h.streamEnded()
	if h.recordCut(now, cut) || h.recordCut(now, cut) {
		t.Fatal("degraded before three cuts in a row")
	}
	if !h.recordCut(now, cut) || !h.isDegraded() || h.state(now).Reason != "consecutive streams failed midway" {
		t.Fatalf("three cuts in a row: %+v", h.state(now))
	}
}
