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

// The window counts outcomes in slices: they leave it as they age past
// Window, the error ratio is over what is left, and a success-heavy
// window is not degraded by a few failures.
func TestHealthWindow(t *testing.T) {
	h := &health{cfg: HealthConfig{Window: time.Minute, MinRequests: 10, MaxErrorRatio: 0.5}.withDefaults()}
	t0 := time.Unix(1_800_000_000, 0)
	fail := &ProviderError{Kind: KindServer, Status: 500}
	for i := range 20 {
		h.record(t0.Add(time.Duration(i)*time.Millisecond), nil)
	}
	for i := range 9 {
		if h.record(t0.Add(time.Second+time.Duration(i)*time.Millisecond), fail) {
			t.Fatalf("degraded at failure %d of 29 outcomes", i+1)
		}
	}
	if s := h.state(t0.Add(2 * time.Second)); s.Requests != 29 || s.Failures != 9 {
		t.Fatalf("state %+v, want 29 requests, 9 failures", s)
	}
	// A minute on, the successes have left the window, the failures not
	// yet: the next failure makes 10 of 10.
	at := t0.Add(time.Minute + 500*time.Millisecond)
	if s := h.state(at); s.Requests != 9 || s.Failures != 9 {
		t.Fatalf("a minute on: %+v, want the 9 failures alone", s)
	}
	if !h.record(at, fail) {
		t.Fatal("10 failures of 10 in the window did not degrade it")
	}
	if s := h.state(at.Add(2 * time.Minute)); s.Requests != 0 || s.Failures != 0 || !s.Degraded {
		t.Fatalf("two minutes on: %+v", s)
	}
}
