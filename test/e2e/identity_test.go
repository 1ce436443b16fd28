package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// plant gives b the cookie value as its connection cookie, as an attacker
// who planted it in a victim's browser (or copied the victim's) would.
func (b *browser) plant(value string) {
	b.jar = jarWith(b.base, value)
	b.http.Jar = b.jar
}

// jarWith is a cookie jar holding value as the connection cookie for base.
func jarWith(base, value string) *cookiejar.Jar {
	u, _ := url.Parse(base)
	jar, _ := cookiejar.New(nil)
	jar.SetCookies(u, []*http.Cookie{{Name: "stickyd_conn", Value: value, Path: "/"}})
	return jar
}

// A cookie planted in a victim's browser before they log in is worth
// nothing after: the login issues a new one, bound to the person, and the
// planted one (and any WebSocket opened with it) names nobody.
func TestSessionFixation(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, mode, 2)
			attacker := newBrowser(t, a)
			if code, body := attacker.do("POST", "/whoami"); code != 200 {
				t.Fatalf("attacker's first request: %d %s", code, body)
			}
			planted := attacker.cookie()
			anon := attacker.whoami()
			if planted == "" || anon.User != "" {
				t.Fatalf("attacker has cookie %q, user %q", planted, anon.User)
			}
			// The attacker keeps a WebSocket and a page open on the
			// connection.
			spy := attacker.openTab("spy")

			victim := newBrowser(t, a)
			victim.plant(planted)
			if got := victim.whoami(); got.Conn != anon.Conn {
				t.Fatalf("the planted cookie names %q, want %q", got.Conn, anon.Conn)
			}
			if code, body := victim.do("POST", "/login?user=alice"); code != 200 {
				t.Fatalf("login: %d %s", code, body)
			}
			if victim.cookie() == planted {
				t.Fatal("the login did not issue a new cookie")
			}
			if got := victim.whoami(); got.User != "alice" || got.Conn != anon.Conn {
				t.Fatalf("after the login the victim is %+v", got)
			}
			// The attacker's cookie no longer names alice's connection.
			if got := attacker.whoami(); got.User == "alice" || got.Conn == anon.Conn {
				t.Fatalf("the planted cookie still names the victim: %+v", got)
			}
			// Nor does its WebSocket: the next op closes it.
			if a, err := spy.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}}); err == nil {
				t.Fatalf("the attacker's WebSocket still works after the victim's login: %+v", a)
			}
			// A WebSocket opened with the planted cookie is refused.
			if ws, resp, err := (&browser{t: t, base: attacker.base, jar: jarWith(attacker.base, planted)}).dial(); err == nil {
				ws.Close()
				t.Fatal("a WebSocket opened with the planted cookie after the login")
			} else if resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("dialing with the planted cookie: %v", err)
			}
			// The victim's session is untouched.
			tb := victim.openTab("p1")
			if a := tb.send(map[string]any{"op": "inc"}); a.Op != "reply" {
				t.Fatalf("victim's op: %+v", a)
			}
			if got := victim.whoami(); got.User != "alice" {
				t.Fatalf("victim is now %+v", got)
			}
		})
	}
}

// A newcomer whose site names its connection after an existing one is
// refused (409, no cookie): it does not take that connection's person,
// whichever worker it was placed on.
func TestConnectionNameTakeover(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			a := startAgent(t, mode, 2)
			for i := range 6 {
				name := fmt.Sprintf("victim-%d", i)
				victim := newBrowser(t, a)
				if code, body := victim.do("GET", "/name?conn="+name); code != 200 {
					t.Fatalf("naming: %d %s", code, body)
				}
				if code, body := victim.do("POST", "/login?user=bob"+fmt.Sprint(i)); code != 200 {
					t.Fatalf("login: %d %s", code, body)
				}
				before := victim.whoami()

				intruder := newBrowser(t, a)
				code, body := intruder.do("GET", "/name?conn="+name)
				if code != http.StatusConflict {
					t.Fatalf("takeover %d: HTTP %d %s, want 409", i, code, body)
				}
				if c := intruder.cookie(); c != "" {
					t.Fatalf("takeover %d: the intruder got a cookie", i)
				}
				if after := victim.whoami(); after != before {
					t.Fatalf("takeover %d: the victim was %+v, is %+v", i, before, after)
				}
			}
		})
	}
}

// A server's cookie key file deleted or damaged after it ran is a start
// refused with the reason, never a new identity for everyone.
func TestCookieKeyFileRefusedAtStart(t *testing.T) {
	key := filepath.Join(t.TempDir(), "cookie.key")
	p := newProcSpec(t, procSpec{workers: 1, name: "solo", expect: 1, front: fmt.Sprintf("  cookie_key_file = %q\n", key)})
	p.start()
	b := newBrowserAt(t, "http://"+p.front)
	if code, body := b.do("POST", "/login?user=ana"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	refused := func(what string, want ...string) {
		t.Helper()
		p.out.Reset()
		p.launch()
		select {
		case err := <-p.exited:
			if err == nil {
				t.Fatalf("the agent exited 0 with its cookie key %s", what)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the agent started with its cookie key %s:\n%s", what, p.out)
		}
		for _, w := range want {
			if out := p.out.String(); !strings.Contains(out, w) {
				t.Fatalf("the refusal of a key %s does not say %q:\n%s", what, w, out)
			}
		}
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	refused("deleted", "cookie.key is missing", "has run before")
	if _, err := os.Stat(key); !os.IsNotExist(err) {
		t.Fatal("a new cookie key was written")
	}
	damaged := bytes.Clone(good)
	damaged[7] ^= 0x20
	if err := os.WriteFile(key, damaged, 0o600); err != nil {
		t.Fatal(err)
	}
	refused("damaged", "share no key with the cluster's ring", "restore the files")
	// The key restored: ana is ana again.
	if err := os.WriteFile(key, good, 0o600); err != nil {
		t.Fatal(err)
	}
	p.out.Reset()
	p.start()
	if got := b.whoami(); got.User != "ana" {
		t.Fatalf("after the key was restored: %+v", got)
	}
}

// A person keeps one identity through every front of a cluster: the
// cookie key ring is the cluster's, in the maps, made by the first leader
// (no key files); a restart of every server keeps it; a rotation
// (stickyd operator keyring rotate) logs nobody out and every front signs
// with the new key.
func TestOneCookieRingAcrossServers(t *testing.T) {
	waits(t)
	ps := startThreeServers(t)
	b := newBrowserAt(t, "http://"+ps[0].front)
	if code, body := b.do("POST", "/login?user=ana"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	me := b.whoami()
	for _, p := range ps {
		if _, err := os.Stat(filepath.Join(p.dir, "data", "cookie.key")); !os.IsNotExist(err) {
			t.Fatalf("%s wrote a key of its own", p.admin)
		}
	}
	check := func(when string) {
		t.Helper()
		for i, p := range ps {
			b.base = "http://" + p.front // one cookie jar: browsers send a host's cookie to each of its ports
			if got := b.whoami(); got.User != "ana" || got.Conn != me.Conn {
				t.Fatalf("%s, through front %d: %+v, want %+v", when, i+1, got, me)
			}
		}
	}
	check("after the login")
	ids := func(p *proc) []string {
		t.Helper()
		var ring struct {
			Keys []struct {
				ID    string `json:"id"`
				Signs bool   `json:"signs"`
			} `json:"keys"`
		}
		code, body := adminCallAt(t, p.admin, "GET", "/v1/operator/keyring", testToken)
		if err := json.Unmarshal([]byte(body), &ring); code != 200 || err != nil {
			t.Fatalf("keyring: %d %s", code, body)
		}
		var out []string
		for _, k := range ring.Keys {
			out = append(out, k.ID)
		}
		return out
	}
	before := ids(ps[1])
	if len(before) != 1 || len(before[0]) != 16 {
		t.Fatalf("keyring %v", before)
	}
	out, code := runCLI(t, ps[2].admin, "operator", "keyring", "rotate")
	if code != 0 || !strings.Contains(out, "Rotated") {
		t.Fatalf("rotate: %d %s", code, out)
	}
	waitFor(t, 10*time.Second, "every server on the new ring", func() bool {
		for _, p := range ps {
			if got := ids(p); len(got) != 2 || got[1] != before[0] {
				return false
			}
		}
		return true
	})
	check("after a rotation")
	for i, p := range ps {
		if err := p.stop(syscall.SIGTERM); err != nil {
			t.Fatalf("stopping %d: %v", i+1, err)
		}
	}
	for _, p := range ps {
		p.launch()
	}
	for _, p := range ps {
		p.waitHealthy()
	}
	check("after every server restarted")
	// A cookie issued after the rotation verifies under the new key alone:
	// the new key signs on every front.
	fresh := newBrowserAt(t, "http://"+ps[1].front)
	if code, body := fresh.do("POST", "/login?user=bo"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	out, code = runCLI(t, ps[0].admin, "operator", "keyring", "list")
	if code != 0 || !strings.Contains(out, before[0]) {
		t.Fatalf("list: %d %s", code, out)
	}
}

// A real agent's front reads request framing strictly: bare-LF requests
// pipelined on one connection are answered once, 400, and the connection
// ends; so is a request with both Content-Length and Transfer-Encoding;
// requests framed with CRLF are served pipelined. Each refusal is counted.
func TestFrontRefusesLooseFraming(t *testing.T) {
	p := newProc(t, 1)
	p.start()
	send := func(raw string) (codes []int, closed bool) {
		t.Helper()
		c, err := net.Dial("tcp", p.front)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		for {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				var ne net.Error
				return codes, !(errors.As(err, &ne) && ne.Timeout())
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
		}
	}
	health := "GET /_stickyd/health HTTP/1.1\r\nHost: x\r\n\r\n"
	if codes, _ := send(health + strings.Replace(health, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)); fmt.Sprint(codes) != "[200 200]" {
		t.Fatalf("two pipelined requests framed with CRLF: %v", codes)
	}
	bare := strings.ReplaceAll(health, "\r\n", "\n")
	if codes, closed := send(bare + bare); fmt.Sprint(codes) != "[400]" || !closed {
		t.Fatalf("two pipelined bare-LF requests: %v, closed %v; want one 400 and the connection ended", codes, closed)
	}
	clte := "POST /whoami HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + health
	if codes, closed := send(clte); fmt.Sprint(codes) != "[400]" || !closed {
		t.Fatalf("Content-Length with Transfer-Encoding: %v, closed %v; want one 400 and the connection ended", codes, closed)
	}
	_, body := adminCallAt(t, p.admin, "GET", "/metrics", testToken)
	for _, want := range []string{`stickyd_front_framing_refused_total{reason="bare_lf"} 1`, `stickyd_front_framing_refused_total{reason="content_length_and_transfer_encoding"} 1`} {
		if !strings.Contains(body, want) {
			t.Fatalf("metrics lack %s", want)
		}
	}
}
