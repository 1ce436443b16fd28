package dev_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stickyd/stickyd/internal/freeport"
)

// An application's own main (the example site-dev, two lines over package
// dev) is stickyd with the application compiled in: built and run as an
// author runs it, it serves the site on in-process workers, keeps a
// person's cart between requests, answers -help and a wrong -app with a
// message and exit code, and stops cleanly on SIGTERM.
func TestApplicationMainRunsDev(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "site-dev")
	build := exec.Command("go", "build", "-o", bin, "github.com/stickyd/stickyd/plugins/examples/site/cmd/site-dev")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building site-dev: %v\n%s", err, out)
	}

	out, err := exec.Command(bin, "dev", "-help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "-app=NAME") {
		t.Fatalf("dev -help: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "dev", "-app", "nope").CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "has no such application (it has site)") {
		t.Fatalf("dev -app nope: %v\n%s", err, out)
	}

	addr := freeport.Addr(t)
	var logs bytes.Buffer
	cmd := exec.Command(bin, "dev", "-addr", addr, "-workers", "1")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	base := "http://" + addr
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := c.Get(base + "/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("site-dev never served: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, item := range []string{"tea", "cups"} {
		resp, err := c.PostForm(base+"/add", url.Values{"item": {item}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 { // after the redirect to the cart
			t.Fatalf("adding %s: %d", item, resp.StatusCode)
		}
	}
	resp, err := c.Get(base + "/cart.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Worker string   `json:"worker"`
		Items  []string `json:"items"`
	}
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if err != nil || strings.Join(v.Items, ",") != "tea,cups" || v.Worker != "site-1" {
		t.Fatalf("the cart is %+v (%v), want tea,cups on site-1", v, err)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("site-dev stopped with %v\n%s", err, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("site-dev did not stop on SIGTERM\n%s", logs.String())
	}
}
