package e2e

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The read token (admin.read_token_file) reads and does nothing else: the
// admin API's GET calls and the CLI's list commands, the monitor page and
// the health check's details; a call that acts, and the raft snapshot
// (it holds the cookie keys), answer 403 saying it needs the admin token.
func TestReadToken(t *testing.T) {
	const readToken = "e2e-read-only-token"
	file := filepath.Join(t.TempDir(), "read.token")
	if err := os.WriteFile(file, []byte(readToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := newProcSpec(t, procSpec{workers: 1, name: "solo", expect: 1, adminExtra: "  read_token_file = \"" + file + "\"\n"})
	p.start()
	b := newBrowserAt(t, "http://"+p.front)
	if code, body := b.do("POST", "/login?user=ana"); code != 200 {
		t.Fatalf("login: %d %s", code, body)
	}

	cli := func(args ...string) (string, int) {
		t.Helper()
		exe, _ := os.Executable()
		cmd := exec.Command(exe, append(args, "-address", "http://"+p.admin, "-token", readToken)...)
		cmd.Env = append(os.Environ(), agentEnv+"=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return string(out), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := cli("user", "list"); code != 0 || !strings.Contains(out, "ana") {
		t.Fatalf("user list with the read token: %d %s", code, out)
	}
	if out, code := cli("user", "forget", "ana"); code == 0 || !strings.Contains(out, "the read token may only read") {
		t.Fatalf("user forget with the read token: %d %s", code, out)
	}
	if got := b.whoami(); got.User != "ana" {
		t.Fatalf("ana after the refused forget: %+v", got)
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/operator/snapshot"},
		{"POST", "/v1/operator/keyring/rotate"},
		{"POST", "/v1/workers/web-1/drain"},
	} {
		if code, body := adminCallAt(t, p.admin, c.method, c.path, readToken); code != http.StatusForbidden || !strings.Contains(body, "needs the admin token") {
			t.Fatalf("%s %s with the read token: %d %s", c.method, c.path, code, body)
		}
	}
	if code, _ := adminCallAt(t, p.admin, "GET", "/v1/operator/keyring", readToken); code != 200 {
		t.Fatalf("GET keyring with the read token: %d", code)
	}
	if code, _ := adminCallAt(t, p.admin, "GET", "/v1/users", "not-a-token"); code != http.StatusForbidden {
		t.Fatalf("a wrong token: %d", code)
	}

	// The monitor page takes it.
	mon := newBrowserAt(t, "http://"+p.front)
	req, _ := http.NewRequest("POST", mon.base+"/_stickyd/monitor/", strings.NewReader(url.Values{"token": {readToken}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", mon.base)
	resp, err := mon.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if code, body := mon.do("GET", "/_stickyd/monitor/api/view"); code != 200 || !strings.Contains(body, "ana") {
		t.Fatalf("the monitor's view after a login with the read token: %d %.200s", code, body)
	}
	// And the health check's details.
	hreq, _ := http.NewRequest("GET", "http://"+p.front+"/_stickyd/health", nil)
	hreq.Header.Set("Authorization", "Bearer "+readToken)
	hresp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if !strings.Contains(string(body), "ready_workers") {
		t.Fatalf("health with the read token: %s", body)
	}
}
