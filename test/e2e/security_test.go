package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	openai "github.com/sashabaranov/go-openai"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/gateway"
)

// secret returns a random string that appears nowhere unless leaked.
func secret(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// Rotating the cookie key logs nobody out: the new key is first accepted,
// then signs, with the old one kept behind it; only once the old key leaves
// the ring do its cookies name nobody (a new identity, as a forged cookie
// gets). The agent restarts on the same data dir between the steps, as an
// operator's rolling restart does.
func TestCookieKeyRotationAcrossRestarts(t *testing.T) {
	dir, keys := t.TempDir(), t.TempDir()
	write := func(name string) string {
		p := filepath.Join(keys, name)
		if err := os.WriteFile(p, []byte(secret("cookie-key-")), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldKey, newKey := write("old.key"), write("new.key")
	start := func(ring ...string) *agent.Agent {
		return startAgentWith(t, "inprocess", 1, func(c *agent.Config) {
			c.DataDir, c.Server.RaftAddr = dir, "127.0.0.1:0"
			c.Front.CookieKeyFiles = ring
		})
	}
	stop := func(a *agent.Agent) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := a.Shutdown(ctx); err != nil {
			t.Fatalf("stopping: %v", err)
		}
	}

	a := start(oldKey)
	ida := newBrowser(t, a)
	if code, body := ida.do("POST", "/login?user=ida"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	before := ida.whoami()
	oldCookie := ida.cookie()
	stop(a)

	for _, step := range []struct {
		what string
		ring []string
	}{
		{"new key accepted, old key signs", []string{oldKey, newKey}},
		{"new key signs, old key accepted", []string{newKey, oldKey}},
	} {
		a = start(step.ring...)
		ida.base = "http://" + a.Addr()
		if w := ida.whoami(); w.Conn != before.Conn || w.User != "ida" {
			t.Fatalf("%s: ida is %+v, was %+v", step.what, w, before)
		}
		// While the old key signs, its cookie stays; once the new key
		// signs, the front re-signs the old key's cookie with it (the
		// person moves to the new key at their next request).
		if renewed := ida.cookie() != oldCookie; renewed != (step.ring[0] == newKey) {
			t.Fatalf("%s: the cookie was renewed: %v", step.what, renewed)
		}
		if step.ring[0] == oldKey {
			stop(a)
		}
	}
	// A newcomer now gets a cookie of the new key.
	bo := newBrowser(t, a)
	if code, body := bo.do("POST", "/login?user=bo"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	boConn := bo.whoami().Conn
	stop(a)

	// The old key leaves the ring: its cookie names nobody; the new key's
	// cookie still does.
	a = start(newKey)
	ida.base, bo.base = "http://"+a.Addr(), "http://"+a.Addr()
	if w := bo.whoami(); w.Conn != boConn || w.User != "bo" {
		t.Fatalf("bo (new key's cookie) is %+v after the old key left", w)
	}
	// A browser still holding the old key's cookie (one that has not come
	// back since the rotation) is a newcomer.
	u, _ := url.Parse(ida.base)
	ida.jar.SetCookies(u, []*http.Cookie{{Name: "stickyd_conn", Value: oldCookie, Path: "/"}})
	w := ida.whoami()
	if w.Conn == before.Conn || w.User == "ida" {
		t.Fatalf("a cookie of a dropped key still names ida: %+v", w)
	}
	if c := ida.cookie(); c == oldCookie || c == "" {
		t.Fatalf("no fresh cookie for a dropped key's cookie: %q", c)
	}
}

// frame_rate in the front block reaches the front: one person's ops over
// the burst are refused with a retryable rate_limited error and counted on
// /metrics, while the ops within it are answered.
func TestFrameRateConfigured(t *testing.T) {
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) {
		c.Front.FrameRate, c.Front.FrameBurst = 0.01, 3 // a token per 100 s: the test never sees a refill
	})
	b := newBrowser(t, a)
	b.whoami()           // a newcomer's request: no person yet, nothing counted
	tb := b.openTab("p") // the open: 1 token
	var replies, refused int
	for range 5 {
		switch a := tb.op(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}}); {
		case a.Op == "reply":
			replies++
		case a.Op == "error" && a.Code == "rate_limited" && a.Retry:
			refused++
		default:
			t.Fatalf("answer %+v", a)
		}
	}
	if replies != 2 || refused != 3 {
		t.Fatalf("%d replies and %d refusals, want 2 and 3 (a burst of 3, the open included)", replies, refused)
	}
	code, body := adminCall(t, a, "GET", "/v1/metrics", testToken, "")
	if code != 200 || !strings.Contains(body, `stickyd_front_rate_limited_frames_total{via="websocket"} 3`) {
		t.Fatalf("metrics: %d, want 3 websocket refusals counted:\n%s", code, grepLines(body, "rate_limited"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// syncBuffer is a log sink shared by the agent's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// No secret reaches the log: an agent logging at trace level, with an admin
// token, gateway API keys, a provider key and a cookie key ring, serves
// browsers, admin calls, the monitor and gateway calls (right and wrong
// credentials alike) and stops; none of the secrets is in what it logged.
func TestNoSecretsInLogs(t *testing.T) {
	adminToken, gatewayKey, providerKey := secret("admin-"), secret("gwkey-"), secret("sk-provider-")
	cookieKey := secret("cookie-key-")
	keyFile := filepath.Join(t.TempDir(), "cookie.key")
	if err := os.WriteFile(keyFile, []byte(cookieKey), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("E2E_PROVIDER_KEY", providerKey)
	p := &provider{calls: map[string]int{}, usage: gateway.Usage{Input: 1, Output: 1}}
	var keyed, unkeyed int
	var mu sync.Mutex
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.Header.Get("Authorization") == "Bearer "+providerKey {
			keyed++
		} else {
			unkeyed++
		}
		mu.Unlock()
		p.serve(w, r)
	}))
	t.Cleanup(p.srv.Close)

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &agent.Config{
		LogLevel: "trace",
		Name:     "e2e",
		DataDir:  t.TempDir(),
		Front:    &agent.FrontConfig{Address: "127.0.0.1:0", CookieKeyFiles: []string{keyFile}},
		Admin:    &agent.AdminConfig{Address: "127.0.0.1:0", Token: adminToken},
		Server:   &agent.ServerConfig{RaftAddr: "127.0.0.1:0"},
		Groups: []*agent.GroupConfig{{Name: "web", Workers: 1,
			Plugin: &agent.PluginConfig{Command: exe, Env: map[string]string{workerEnv: "counter"}}}},
		Gateway: &agent.GatewayConfig{Address: "127.0.0.1:0", GRPCAddress: "127.0.0.1:0",
			APIKeys: map[string]string{"billing": gatewayKey},
			Models: []*agent.GatewayModel{{Name: "small", Concurrency: 2, Deployments: []*agent.GatewayDeployment{{
				Name: "local", Provider: "openai", BaseURL: p.srv.URL + "/v1", Model: "small-v1", APIKeyEnv: "E2E_PROVIDER_KEY",
				Price: &gateway.Price{Free: true}}}}}},
	}
	logs := &syncBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: "agent", Level: hclog.Trace, Output: logs})
	a, err := agent.New(cfg, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		t.Fatalf("starting agent: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = a.Shutdown(context.Background())
		}
	})

	// Browsers: a login, a page, ops, a forged cookie.
	b := newBrowser(t, a)
	if code, body := b.do("POST", "/login?user=ida"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}
	tb := b.openTab("p")
	tb.send(map[string]any{"op": "inc"})
	tb.pull(0)
	req := newRawRequest(t, b.base+"/whoami", "forged.AAAA")
	if resp, _ := rawDo(t, req); resp.StatusCode != 200 {
		t.Fatalf("forged cookie: %d", resp.StatusCode)
	}

	// Admin calls: right, wrong, a prefix of the token, the token and more.
	for _, tt := range []struct {
		token string
		code  int
	}{{adminToken, 200}, {"", 401}, {"wrong", 403}, {adminToken[:len(adminToken)-1], 403}, {adminToken + "x", 403}} {
		if code, body := adminCall(t, a, "GET", "/v1/users", tt.token, ""); code != tt.code {
			t.Fatalf("admin call with %q: %d %s", tt.token, code, body)
		}
	}
	if code, _ := adminCall(t, a, "POST", "/v1/users/ida/move", adminToken, `{"to":"nowhere"}`); code != 404 {
		t.Fatalf("a bad move: %d", code)
	}

	// The monitor: a login by ?token= (right and wrong) and the view.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// In this order: past three wrong tokens, each delays the client's
	// next try.
	wrong := "wrong-" + adminToken
	for _, tt := range []struct {
		tok  string
		want int
	}{{adminToken, http.StatusSeeOther}, {wrong, http.StatusForbidden}, {adminToken, http.StatusSeeOther},
		{wrong, http.StatusForbidden}, {wrong, http.StatusForbidden}, {wrong, http.StatusForbidden}, {wrong, http.StatusForbidden},
		{adminToken, http.StatusTooManyRequests}} {
		tok, want := tt.tok, tt.want
		resp, err := noRedirect.Get("http://" + a.Addr() + "/_stickyd/monitor/?token=" + tok)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("monitor login: %d, want %d", resp.StatusCode, want)
		}
	}

	// The gateway: a call with the key, one with a wrong key.
	gw := openai.DefaultConfig(gatewayKey)
	gw.BaseURL = "http://" + a.GatewayAddr() + "/v1"
	if _, err := openai.NewClientWithConfig(gw).CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "small",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hello"}}}); err != nil {
		t.Fatal(err)
	}
	bad := openai.DefaultConfig("not-" + gatewayKey)
	bad.BaseURL = gw.BaseURL
	if _, err := openai.NewClientWithConfig(bad).CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "small",
		Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x"}}}); err == nil {
		t.Fatal("a wrong gateway key was taken")
	}
	mu.Lock()
	if keyed == 0 || unkeyed != 0 {
		t.Fatalf("the provider saw %d calls with its key and %d without", keyed, unkeyed)
	}
	mu.Unlock()

	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	if err := a.Shutdown(sctx); err != nil {
		t.Fatalf("shutting down: %v", err)
	}
	stopped = true

	out := logs.String()
	// The log is worth searching: it holds the run, requests included.
	for _, want := range []string{"front listening", "admin API listening"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the log lacks %q: the sink missed the agent's logging", want)
		}
	}
	for what, s := range map[string]string{
		"admin token":      adminToken,
		"gateway key":      gatewayKey,
		"provider key":     providerKey,
		"cookie key":       cookieKey,
		"cookie key (b64)": base64.StdEncoding.EncodeToString([]byte(cookieKey)),
	} {
		if i := strings.Index(out, s); i >= 0 {
			line := out[strings.LastIndexByte(out[:i], '\n')+1:]
			if j := strings.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			t.Errorf("the %s is in the log: %s", what, line)
		}
	}
	t.Logf("searched %d bytes of trace-level log", len(out))
	if os.Getenv("E2E_DUMP_LOG") != "" {
		t.Log(out)
	}
}
