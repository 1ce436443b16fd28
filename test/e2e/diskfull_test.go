package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A full data_dir is a clear, counted condition (docs/operations.md): an
// agent whose data_dir is a 30 MB tmpfs, with people typing, has the disk
// filled under it. New visitors get 503 saying so, the raft leader stays
// (no flapping), the people typing go on with every write answered, the
// health check and the metrics say the disk is full. Once space returns,
// newcomers are served again, and a restart finds every acknowledged
// write: every count whole.
func TestFullDataDir(t *testing.T) {
	waits(t)
	const people = 8
	p := newProcSpec(t, procSpec{workers: 1, name: "solo", expect: 1})
	data := filepath.Join(p.dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=30m", "tmpfs", data).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v: %s); the full-disk test needs root", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", data).Run() })
	p.start()
	tabs := make([]*tab, people)
	for i := range tabs {
		b := procBrowser(t, p)
		if code, body := b.do("POST", "/login?user=d"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tabs[i] = b.openTab("typing")
	}
	counts := make([]int, people)
	typeAll := func(what string) {
		for i, tb := range tabs {
			a, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
			if err != nil || a.Error != "" {
				t.Fatalf("%s: person %d's inc: %+v %v\n%s", what, i, a, err, p.out)
			}
			counts[i]++
			if !strings.Contains(string(a.Data), fmt.Sprintf(`"count":%d`, counts[i])) {
				t.Fatalf("%s: person %d's inc answered %s, want count %d", what, i, a.Data, counts[i])
			}
		}
	}
	typeAll("before the disk fills")
	leader := p.leaderTerm()

	// Fill the disk, leaving a few KiB.
	var st syscall.Statfs_t
	if err := syscall.Statfs(data, &st); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(data, "filler")
	free := int64(st.Bavail) * st.Bsize
	if out, err := exec.Command("fallocate", "-l", strconv.FormatInt(free-16<<10, 10), filler).CombinedOutput(); err != nil {
		t.Fatalf("filling the disk: %v %s", err, out)
	}
	waitFor(t, 10*time.Second, "the health check to say the disk is full", func() bool { return p.diskFull() })
	// Typing goes on through the full disk, checkpoint rounds included.
	until := time.Now().Add(8 * time.Second)
	for time.Now().Before(until) {
		typeAll("the disk full")
		time.Sleep(100 * time.Millisecond)
	}
	// A newcomer is refused, saying why.
	resp, err := http.Get("http://" + p.front + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "disk") {
		t.Fatalf("a newcomer with the disk full: HTTP %d %s", resp.StatusCode, body)
	}
	if lt := p.leaderTerm(); lt != leader {
		t.Fatalf("raft flapped while the disk was full: leader and term %s, then %s\n%s", leader, lt, p.out)
	}

	// Space returns.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the health check to say the disk has room again", func() bool { return !p.diskFull() })
	typeAll("after space returned")
	if code, _ := procBrowser(t, p).do("GET", "/"); code != 200 {
		t.Fatalf("a newcomer after space returned: HTTP %d", code)
	}
	// Nothing acknowledged is lost: a restart finds every count.
	if err := p.stop(syscall.SIGTERM); err != nil {
		t.Fatalf("agent exit: %v\n%s", err, p.out)
	}
	for _, tb := range tabs {
		tb.ws.Close()
	}
	p.start()
	for i, tb := range tabs {
		tb.connect()
		tb.drainUntil("count", counts[i])
	}
	typeAll("after the restart")
}

// diskFull reads the health check's disk_full.
func (p *proc) diskFull() bool {
	p.t.Helper()
	resp, err := healthDetails(p.front)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		DiskFull bool `json:"disk_full"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&h)
	return h.DiskFull
}

// leaderTerm is the raft leader and term as the agent's status says.
func (p *proc) leaderTerm() string {
	p.t.Helper()
	code, body := adminCallAt(p.t, p.admin, "GET", "/v1/status", testToken)
	if code != 200 {
		p.t.Fatalf("status: %d %s", code, body)
	}
	var st struct {
		Leader string `json:"leader"`
		Term   uint64 `json:"term"`
	}
	_ = json.Unmarshal([]byte(body), &st)
	return fmt.Sprintf("%s@%d", st.Leader, st.Term)
}
