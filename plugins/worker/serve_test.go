package worker

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// serveHelperEnv makes the test binary run Serve (TestServeHelper).
const serveHelperEnv = "STICKYD_WORKER_TEST_SERVE"

// TestServeHelper is the test binary as a worker's main, for the tests that
// start it; it does nothing in an ordinary run.
func TestServeHelper(t *testing.T) {
	if os.Getenv(serveHelperEnv) == "" {
		t.Skip("run by the tests that start a worker")
	}
	Serve(testApp{}, Options{Name: "shop"})
}

// A worker run by hand (no stickyd host set its cookie) says what it is and
// how it is run, and exits with 1, before it listens or prints a handshake.
func TestServeByHandExplains(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestServeHelper$")
	cmd.Env = append(os.Environ(), serveHelperEnv+"=1", "STICKYD_WORKER_PLUGIN=")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v\n%s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "This is the stickyd worker of shop") ||
		!strings.Contains(stderr.String(), "not meant to be run by hand") {
		t.Fatalf("stderr:\n%s", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("stdout: %q", stdout.String())
	}
}
