package tfprovider

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	apiclient "github.com/stickyd/stickyd/internal/api/client"
)

func TestClientErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/rules", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadGateway)
		fmt.Fprint(w, "<html>upstream down</html>\n<body>")
	})
	mux.HandleFunc("DELETE /v1/rules/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"id": "j1", "kind": "assign"}`)
	})
	mux.HandleFunc("GET /v1/jobs/j1", func(w http.ResponseWriter, r *http.Request) {
		// One move, then the stream ends without the job's final line.
		fmt.Fprintln(w, `{"move": {"user": "ana", "from": "w-1", "to": "w-2"}}`)
	})
	mux.HandleFunc("PUT /v1/rules/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{}`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	c, err := newClient(srv.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	if _, err := c.rules(ctx); err == nil || err.Error() != "the admin API answered 502 Bad Gateway: <html>upstream down</html>" {
		t.Errorf("a non-API answer: %v", err)
	}
	out, err := c.deleteRule(ctx, "r")
	if err == nil || !strings.Contains(err.Error(), "ended job j1's stream before the job finished") || out.Job.ID != "j1" {
		t.Errorf("a stream cut short: %v, %+v", err, out)
	}
	if _, err := c.putRule(ctx, "r", apiclient.RuleRequest{Group: "web", User: "ana"}); err == nil || !strings.Contains(err.Error(), "names no job") {
		t.Errorf("an answer without a job: %v", err)
	}

	// A closed port: the error names the address.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	down, err := newClient(addr, testToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.rules(ctx); err == nil || !strings.Contains(err.Error(), "cannot reach the stickyd admin API at http://"+addr) {
		t.Errorf("an unreachable agent: %v", err)
	}
}

func TestNewClient(t *testing.T) {
	cases := []struct {
		address, token string
		want           string // base, or the error's start
	}{
		{"127.0.0.1:4650", "t", "http://127.0.0.1:4650"},
		{"https://stickyd.example/admin/", "t", "https://stickyd.example/admin"},
		{"ftp://x", "t", "address"},
		{"http://127.0.0.1:4650", "", "no admin token"},
	}
	for _, tc := range cases {
		c, err := newClient(tc.address, tc.token)
		switch {
		case err != nil && !strings.HasPrefix(err.Error(), tc.want):
			t.Errorf("%q: %v, want %q", tc.address, err, tc.want)
		case err == nil && c.api.Address() != tc.want:
			t.Errorf("%q: base %q, want %q", tc.address, c.api.Address(), tc.want)
		}
	}
}

func TestProviderConfigure(t *testing.T) {
	p := New("test")()
	var sresp provider.SchemaResponse
	p.Schema(context.Background(), provider.SchemaRequest{}, &sresp)
	typ := sresp.Schema.Type().TerraformType(context.Background())
	config := func(address, token any) tfsdk.Config {
		return tfsdk.Config{Schema: sresp.Schema, Raw: tftypes.NewValue(typ, map[string]tftypes.Value{
			"address": tftypes.NewValue(tftypes.String, address),
			"token":   tftypes.NewValue(tftypes.String, token),
		})}
	}
	cases := []struct {
		name        string
		envAddr     string
		envToken    string
		cfg         tfsdk.Config
		wantBase    string
		wantToken   string
		wantErrPart string
	}{
		{"from the block", "http://env:1", "env-token", config("http://block:2", "block-token"), "http://block:2", "block-token", ""},
		{"from the environment", "http://env:1", "env-token", config(nil, nil), "http://env:1", "env-token", ""},
		{"default address", "", "env-token", config(nil, nil), DefaultAddress, "env-token", ""},
		{"no token", "", "", config(nil, nil), "", "", "no admin token"},
		{"unknown token", "", "", config(nil, tftypes.UnknownValue), "", "", "not known until apply"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("STICKYD_ADDR", tc.envAddr)
			t.Setenv("STICKYD_TOKEN", tc.envToken)
			var resp provider.ConfigureResponse
			p.Configure(context.Background(), provider.ConfigureRequest{Config: tc.cfg}, &resp)
			if tc.wantErrPart != "" {
				wantError(t, resp.Diagnostics, tc.wantErrPart)
				return
			}
			if resp.Diagnostics.HasError() {
				t.Fatal(resp.Diagnostics)
			}
			c := resp.ResourceData.(*client)
			if c.api.Address() != tc.wantBase || c.api.Token() != tc.wantToken {
				t.Errorf("client for %s with %s", c.api.Address(), c.api.Token())
			}
		})
	}
}
