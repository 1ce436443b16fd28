package site

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/plugins/worker"
)

// The site is tested as any net/http site, with a stickyd session in the
// request's context (worker.NewTestContext).
func TestCartAndLogin(t *testing.T) {
	mux := New()
	ctx := worker.NewTestContext(context.Background())
	do := func(method, target string, form url.Values) *httptest.ResponseRecorder {
		t.Helper()
		var r *http.Request
		if form != nil {
			r = httptest.NewRequest(method, target, strings.NewReader(form.Encode()))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		} else {
			r = httptest.NewRequest(method, target, nil)
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r.WithContext(ctx))
		return w
	}
	if w := do("GET", "/", nil); w.Code != 200 || !strings.Contains(w.Body.String(), "The cart is empty") {
		t.Fatalf("empty cart: %d %s", w.Code, w.Body)
	}
	for _, item := range []string{"apple", "pear"} {
		if w := do("POST", "/add", url.Values{"item": {item}}); w.Code != http.StatusSeeOther {
			t.Fatalf("add %s: %d %s", item, w.Code, w.Body)
		}
	}
	if w := do("POST", "/add", url.Values{"item": {"<script>"}}); w.Code != http.StatusBadRequest {
		t.Fatalf("a bad item: %d", w.Code)
	}
	if w := do("POST", "/login", url.Values{"user": {"ada"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("login: %d %s", w.Code, w.Body)
	}
	var v view
	if w := do("GET", "/cart.json", nil); json.Unmarshal(w.Body.Bytes(), &v) != nil || !slices.Equal(v.Items, []string{"apple", "pear"}) || v.User != "ada" {
		t.Fatalf("cart.json: %s", w.Body)
	}
	if w := do("GET", "/", nil); !strings.Contains(w.Body.String(), "<li>pear</li>") || !strings.Contains(w.Body.String(), "Signed in as <b>ada</b>") {
		t.Fatalf("page: %s", w.Body)
	}
	for _, ms := range []string{"-1", "x", "10001"} {
		if w := do("GET", "/slow?ms="+ms, nil); w.Code != http.StatusBadRequest {
			t.Fatalf("slow?ms=%s: %d", ms, w.Code)
		}
	}
	if w := do("GET", "/slow?ms=1", nil); w.Code != 200 {
		t.Fatalf("slow: %d", w.Code)
	}
}
