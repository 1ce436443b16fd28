package front

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Requests without a cookie are limited per source address (IPv6 by its
// /64): past the burst, 429 with Retry-After; another address, a person
// with a cookie and a loopback address are not affected; the bucket fills
// again with time.
func TestNewcomerRate(t *testing.T) {
	now := time.Now()
	f, _, _ := testFront(t, Config{NewcomerRate: 1, NewcomerBurst: 3, Now: func() time.Time { return now }})
	do := func(remote, cookie string) int {
		t.Helper()
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = remote
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: "stickyd_conn", Value: cookie})
		}
		w := httptest.NewRecorder()
		f.ServeHTTP(w, r)
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Fatal("a 429 without Retry-After")
		}
		return w.Code
	}
	for i := range 3 {
		if code := do("203.0.113.7:4000", ""); code == http.StatusTooManyRequests {
			t.Fatalf("newcomer %d of a burst of 3 refused", i+1)
		}
	}
	if code := do("203.0.113.7:4001", ""); code != http.StatusTooManyRequests {
		t.Fatalf("the 4th newcomer from one address: HTTP %d, want 429", code)
	}
	if code := do("[2001:db8:1:2::5]:1", ""); code == http.StatusTooManyRequests {
		t.Fatal("another address was refused")
	}
	for range 2 {
		if code := do("[2001:db8:1:2::6]:1", ""); code == http.StatusTooManyRequests { // the same /64
			t.Fatal("an IPv6 /64 refused within its burst")
		}
	}
	if code := do("[2001:db8:1:2::7]:1", ""); code != http.StatusTooManyRequests {
		t.Fatalf("the 4th newcomer of one IPv6 /64: HTTP %d, want 429", code)
	}
	if code := do("203.0.113.7:4002", f.ring().sign("c1", f.userOf("c1"), now)); code == http.StatusTooManyRequests {
		t.Fatal("a person with a cookie was counted as a newcomer")
	}
	for range 10 {
		if code := do("127.0.0.1:5000", ""); code == http.StatusTooManyRequests {
			t.Fatal("a loopback address was limited")
		}
	}
	now = now.Add(2 * time.Second)
	if code := do("203.0.113.7:4003", ""); code == http.StatusTooManyRequests {
		t.Fatal("the bucket did not fill again")
	}
	if n := testutil.ToFloat64(f.newcomers.refused); n != 2 {
		t.Fatalf("%v refusals counted, want 2", n)
	}
}

// A negative rate turns the limit off.
func TestNewcomerRateOff(t *testing.T) {
	f, _, _ := testFront(t, Config{NewcomerRate: -1})
	if f.newcomers != nil {
		t.Fatal("a negative newcomer rate left a limit")
	}
}
