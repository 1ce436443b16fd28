package front

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func mustRing(t testing.TB, keys ...string) *keyRing {
	t.Helper()
	var kb [][]byte
	for _, k := range keys {
		kb = append(kb, []byte(k))
	}
	r, err := newKeyRing(kb)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// issuedAt is when the tests' cookies are issued.
var issuedAt = time.Unix(1_800_000_000, 0)

// legacySign signs name in the older form, without an issue time, as the
// cookies given out before issue times were.
func legacySign(r *keyRing, name string) string {
	return name + "." + base64.RawURLEncoding.EncodeToString(mac(r.keys[0], name))
}

var (
	keyA = strings.Repeat("a", 32)
	keyB = strings.Repeat("b", 32)
	keyC = strings.Repeat("c", 40)
)

func TestCookieSignVerify(t *testing.T) {
	s := mustRing(t, strings.Repeat("k", 32))
	other := mustRing(t, strings.Repeat("K", 32))
	v := s.sign("conn-1", "", issuedAt)
	if name, at, key, ok := s.check(v); !ok || name != "conn-1" || key != 0 || !at.Equal(issuedAt) {
		t.Fatalf("verify(sign) = %q %v %d %v", name, at, key, ok)
	}
	mac := v[strings.LastIndexByte(v, '.'):]
	// 32 bytes take 43 base64 characters, the last 2 bits of which are
	// padding: a lenient decoder reads this other spelling as the same MAC.
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	respelled := v[:len(v)-1] + string(alphabet[strings.IndexByte(alphabet, v[len(v)-1])^1])
	for what, bad := range map[string]string{
		"other spelling": respelled,
		"line break":     v + "\n",
		"other key":      other.sign("conn-1", "", issuedAt),
		"renamed":        "conn-2" + mac,
		"flipped MAC":    v[:len(v)-1] + string(v[len(v)-1]^1),
		"no MAC":         "conn-1",
		"empty name":     mac,
		"not base64 MAC": "conn-1.!!!",
		"empty":          "",
	} {
		if name, _, _, ok := s.check(bad); ok {
			t.Errorf("%s: %q verified as %q", what, bad, name)
		}
	}
}

// A rotation puts a new key first: new cookies are signed with it, the
// cookies signed before still verify (nobody is logged out), and once the
// old key leaves the ring its cookies name nobody.
func TestCookieKeyRotation(t *testing.T) {
	before := mustRing(t, keyA)
	old := before.sign("conn-old", "", issuedAt)

	// Phase 1: the new key is accepted everywhere before anyone signs with it.
	accepting := mustRing(t, keyA, keyB)
	if accepting.sign("conn-x", "", issuedAt) != before.sign("conn-x", "", issuedAt) {
		t.Fatal("a key added behind the first changed what the ring signs with")
	}
	// Phase 2: the new key signs; the old one still verifies.
	rotated := mustRing(t, keyB, keyA)
	fresh := rotated.sign("conn-new", "", issuedAt)
	if fresh == before.sign("conn-new", "", issuedAt) {
		t.Fatal("the rotated ring still signs with the old key")
	}
	if _, _, _, ok := before.check(fresh); ok {
		t.Fatal("the old ring verified a cookie signed with a key it never had")
	}
	for _, tt := range []struct {
		what  string
		ring  *keyRing
		value string
		conn  string
		key   int
	}{
		{"old cookie, ring accepting the new key", accepting, old, "conn-old", 0},
		{"new cookie, ring accepting the new key", accepting, fresh, "conn-new", 1},
		{"old cookie after the rotation", rotated, old, "conn-old", 1},
		{"new cookie after the rotation", rotated, fresh, "conn-new", 0},
	} {
		t.Run(tt.what, func(t *testing.T) {
			name, _, key, ok := tt.ring.check(tt.value)
			if !ok || name != tt.conn || key != tt.key {
				t.Fatalf("verify = %q key %d %v, want %q key %d", name, key, ok, tt.conn, tt.key)
			}
		})
	}

	// Phase 3: the old key is dropped; its cookies name nobody, the new
	// ones still do.
	dropped := mustRing(t, keyB, keyC)
	if name, _, _, ok := dropped.check(old); ok {
		t.Fatalf("a cookie signed with a dropped key verified as %q", name)
	}
	if name, _, key, ok := dropped.check(fresh); !ok || name != "conn-new" || key != 0 {
		t.Fatalf("the current key's cookie: %q %d %v", name, key, ok)
	}
}

func TestCookieKeyRingChecks(t *testing.T) {
	for _, tt := range []struct {
		what string
		keys [][]byte
		want string
	}{
		{"empty", nil, "empty"},
		{"short", [][]byte{[]byte(keyA), []byte("short")}, "key 2 of the ring holds 5 bytes"},
		{"duplicate", [][]byte{[]byte(keyA), []byte(keyB), []byte(keyA)}, "keys 1 and 3"},
	} {
		t.Run(tt.what, func(t *testing.T) {
			_, err := newKeyRing(tt.keys)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
	// The ring keeps its own copies: a caller reusing its buffer changes
	// nothing.
	buf := []byte(keyA)
	r, err := newKeyRing([][]byte{buf})
	if err != nil {
		t.Fatal(err)
	}
	v := r.sign("c", "", issuedAt)
	copy(buf, bytes.Repeat([]byte("z"), len(buf)))
	if _, _, _, ok := r.check(v); !ok {
		t.Fatal("the ring shares the caller's key buffer")
	}
}

// A cookie carries its issue time inside the signed value: the same
// connection issued at two times gets two values, and neither time can be
// changed without the key. A cookie in the older form (no issue time)
// still verifies, with a zero time, so that it is renewed, not refused.
func TestCookieCarriesItsIssueTime(t *testing.T) {
	r := mustRing(t, keyA)
	a, b := r.sign("conn-1", "", issuedAt), r.sign("conn-1", "", issuedAt.Add(time.Second))
	if a == b {
		t.Fatal("a cookie issued a second later has the same value")
	}
	if _, at, _, ok := r.check(b); !ok || !at.Equal(issuedAt.Add(time.Second)) {
		t.Fatalf("verify = %v %v", at, ok)
	}
	i := strings.LastIndexByte(a, '.')
	j := strings.LastIndexByte(a[:i], '.')
	for what, bad := range map[string]string{
		"later time":   a[:j+1] + "1900000000" + a[i:],
		"leading zero": a[:j+1] + "0" + a[j+1:],
		"legacy MAC":   a[:i] + legacySign(r, "conn-1")[len("conn-1"):],
	} {
		if name, at, _, ok := r.check(bad); ok {
			t.Errorf("%s: %q verified as %q issued %v", what, bad, name, at)
		}
	}
	old := legacySign(r, "conn-old")
	if name, at, key, ok := r.check(old); !ok || name != "conn-old" || !at.IsZero() || key != 0 {
		t.Fatalf("an older cookie: %q %v %d %v", name, at, key, ok)
	}
	// A name with a dot and digits in the older form stays its name: it
	// is not read as a name and an issue time.
	dotted := legacySign(r, "conn-1.1800000000")
	if name, at, _, ok := r.check(dotted); !ok || name != "conn-1.1800000000" || !at.IsZero() {
		t.Fatalf("an older cookie of a dotted name: %q %v %v", name, at, ok)
	}
}

// A cookie's life at the front: renewed past half of it (the session goes
// on past the first cookie's end), refused past all of it (fresh
// identity), renewed on a WebSocket's upgrade, and a page on a WebSocket
// told to fetch a new one when its cookie comes due.
func TestCookieLife(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Now()
	)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	advance := func(d time.Duration) {
		mu.Lock()
		now = now.Add(d)
		mu.Unlock()
	}
	f, _, srv := testFront(t, Config{CookieTTL: time.Hour, Now: clock, PingInterval: 20 * time.Millisecond})
	get := func(value string) (string, *http.Cookie) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/", nil)
		req.AddCookie(&http.Cookie{Name: "stickyd_conn", Value: value})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		for _, c := range resp.Cookies() {
			if c.Name == "stickyd_conn" {
				return string(body), c
			}
		}
		return string(body), nil
	}
	first := f.ring().sign("c1", f.userOf("c1"), clock())
	if body, c := get(first); body != "c1" || c != nil {
		t.Fatalf("a fresh cookie: served as %q, renewed %v", body, c)
	}

	advance(31 * time.Minute)
	body, renewed := get(first)
	if body != "c1" || renewed == nil {
		t.Fatalf("past half its life: served as %q, renewed %v", body, renewed)
	}
	if name, at, _, ok := f.checkAt(renewed.Value); !ok || name != "c1" || !at.Equal(clock().Truncate(time.Second)) || renewed.MaxAge != 3600 {
		t.Fatalf("the renewed cookie names %q issued %v (max-age %d)", name, at, renewed.MaxAge)
	}

	advance(30 * time.Minute) // the first cookie is 61 minutes old
	if body, c := get(first); body == "c1" || c != nil {
		t.Fatalf("an expired cookie: served as %q, cookie %v", body, c)
	}
	if body, _ := get(renewed.Value); body != "c1" {
		t.Fatalf("the renewed cookie, 30 minutes old: served as %q", body)
	}

	// A WebSocket whose cookie is past half its life: the upgrade renews it.
	advance(20 * time.Minute) // the renewed cookie is 50 minutes old
	h := http.Header{"Cookie": {"stickyd_conn=" + renewed.Value}}
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+Prefix+"ws", h)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var upgraded *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "stickyd_conn" {
			upgraded = c
		}
	}
	if upgraded == nil {
		t.Fatal("the upgrade of a WebSocket with a cookie past half its life did not renew it")
	}

	// The socket stays open past half the new cookie's life: the page is
	// told, and fetches a new cookie.
	advance(31 * time.Minute)
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	var m map[string]any
	if err := ws.ReadJSON(&m); err != nil || m["op"] != "renew" {
		t.Fatalf("waiting for the renew notice: %v %v", m, err)
	}
	req, _ := http.NewRequest("POST", srv.URL+Prefix+"renew", nil)
	req.AddCookie(upgraded)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || len(resp.Cookies()) != 1 {
		t.Fatalf("POST renew: HTTP %d, %d cookies", resp.StatusCode, len(resp.Cookies()))
	}
	if name, at, _, ok := f.checkAt(resp.Cookies()[0].Value); !ok || name != "c1" || !at.Equal(clock().Truncate(time.Second)) {
		t.Fatalf("POST renew gave a cookie naming %q issued %v", name, at)
	}
	resp, err = http.Post(srv.URL+Prefix+"renew", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 || resp.StatusCode >= 500 {
		t.Fatalf("POST renew without a cookie: HTTP %d, want a 4xx", resp.StatusCode)
	}
}

// check verifies value as a cookie of an anonymous connection.
func (r *keyRing) check(value string) (name string, issued time.Time, key int, ok bool) {
	name, issued, key, _, ok = r.verify(value, func(string) string { return "" })
	return name, issued, key, ok
}

// checkAt verifies value as a cookie of f's connections as the maps bind
// them now.
func (f *Front) checkAt(value string) (name string, issued time.Time, key int, ok bool) {
	name, issued, key, _, ok = f.ring().verify(value, f.userOf)
	return name, issued, key, ok
}

// userOf is the user key the maps bind conn to ("" for a connection they
// do not hold).
func (f *Front) userOf(conn string) string {
	rt, ok := f.cfg.Directory.Lookup(conn)
	if !ok {
		return ""
	}
	return rt.User
}

// The site gets its cookies as the browser sent them, byte for byte, only
// the front's own cookie taken out: quoted values with commas and spaces
// (as Werkzeug and SimpleCookie write them), quotes, backslashes and bytes
// past ASCII included.
func TestSiteCookiesPassUnchanged(t *testing.T) {
	f := &Front{cfg: Config{CookieName: "stickyd_conn"}}
	for _, c := range []struct {
		name string
		in   []string
		want []string
	}{
		{"no own cookie: unchanged", []string{`cart="apple\054pear"; spaced="a b"`}, []string{`cart="apple\054pear"; spaced="a b"`}},
		{"own cookie first", []string{`stickyd_conn=abc.def; cart="apple\054pear"; q="x\"y"; name=José`}, []string{`cart="apple\054pear"; q="x\"y"; name=José`}},
		{"own cookie in the middle", []string{`a=1; stickyd_conn=abc; b=2`}, []string{`a=1; b=2`}},
		{"own cookie alone", []string{`stickyd_conn=abc`}, nil},
		{"a value that names the cookie stays", []string{`note=stickyd_conn; stickyd_conn=x`}, []string{`note=stickyd_conn`}},
		{"two headers (HTTP/2)", []string{`a=1`, `stickyd_conn=x; b="2 3"`}, []string{`a=1`, `b="2 3"`}},
		{"a longer name is not ours", []string{`stickyd_conn2=keep; stickyd_conn=x`}, []string{`stickyd_conn2=keep`}},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		for _, v := range c.in {
			r.Header.Add("Cookie", v)
		}
		if got := f.stripOwnCookie(r); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
