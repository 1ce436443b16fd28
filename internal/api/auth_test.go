package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Every admin call needs the exact token, in either header: missing → 401,
// anything else (wrong, a prefix, the token and more, another case) → 403.
// An agent whose token is empty opens to nobody.
func TestAdminToken(t *testing.T) {
	const token = "s3cret-admin-token"
	h := Cluster(ClusterConfig{Token: token, Self: func() any { return map[string]string{"name": "a"} }})
	closed := Cluster(ClusterConfig{Token: "", Self: func() any { return nil }})
	for _, tt := range []struct {
		name   string
		h      http.Handler
		header string
		value  string
		want   int
	}{
		{"right token", h, "X-Stickyd-Token", token, 200},
		{"right bearer", h, "Authorization", "Bearer " + token, 200},
		{"missing", h, "", "", 401},
		{"wrong", h, "X-Stickyd-Token", "nope", 403},
		{"same length", h, "X-Stickyd-Token", "s3cret-admin-tokex", 403},
		{"prefix", h, "X-Stickyd-Token", token[:len(token)-1], 403},
		{"longer", h, "X-Stickyd-Token", token + "x", 403},
		{"other case", h, "X-Stickyd-Token", "S3CRET-ADMIN-TOKEN", 403},
		{"empty token configured, empty given", closed, "X-Stickyd-Token", "", 401},
		{"empty token configured, some given", closed, "X-Stickyd-Token", "anything", 403},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest("GET", "/v1/agent/self", nil)
			if tt.header != "" {
				req.Header.Set(tt.header, tt.value)
			}
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Fatalf("%d %s, want %d", rec.Code, rec.Body, tt.want)
			}
		})
	}
}

func TestTokenEqual(t *testing.T) {
	if !tokenEqual("t0ken", "t0ken") || tokenEqual("t0ken", "t0ke") || tokenEqual("", "") || tokenEqual("x", "") {
		t.Fatal("tokenEqual")
	}
}
