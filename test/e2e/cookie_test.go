package e2e

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A site that sets its own cookie on a new connection's first response
// keeps the front's connection cookie: both are sent, and the next request
// is the same connection.
func TestSiteCookieBesideTheFront(t *testing.T) {
	a := startAgent(t, "inprocess", 1)
	b := newBrowser(t, a)
	code, body := b.do("GET", "/setcookie")
	if code != http.StatusOK {
		t.Fatalf("GET /setcookie: %d %s", code, body)
	}
	if b.cookie() == "" {
		t.Fatal("the front's connection cookie was lost")
	}
	u, _ := url.Parse(b.base)
	var names []string
	for _, c := range b.jar.Cookies(u) {
		names = append(names, c.Name)
	}
	if len(names) < 2 || !strings.Contains(strings.Join(names, ","), "site_pref") {
		t.Fatalf("cookies %v: want the front's and site_pref", names)
	}
	if w := b.whoami(); w.Conn != strings.TrimSpace(body) {
		t.Fatalf("the next request is connection %q, the first was %q", w.Conn, strings.TrimSpace(body))
	}
}
