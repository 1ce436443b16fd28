package e2e

import (
	"fmt"
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

// A server that has run before and finds its cookie key gone does not
// start with a new one (every person would silently get a new identity):
// it exits and says which file is missing and what to do.
func TestDeletedCookieKeyRefusedAtStart(t *testing.T) {
	p := newProc(t, 1)
	p.start()
	b := newBrowserAt(t, "http://"+p.front)
	if code, body := b.do("POST", "/login?user=ana"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(p.dir, "data", "cookie.key")
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	p.launch()
	select {
	case err := <-p.exited:
		if err == nil {
			t.Fatal("the agent exited 0 without its cookie key")
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the agent started without its cookie key:\n%s", p.out)
	}
	if out := p.out.String(); !strings.Contains(out, "cookie.key is missing") || !strings.Contains(out, "has run before") {
		t.Fatalf("the refusal does not say why:\n%s", out)
	}
	if _, err := os.Stat(key); !os.IsNotExist(err) {
		t.Fatal("a new cookie key was written")
	}
}
