package bundle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Environment of the helper process TestOpenWithoutNetwork starts.
const (
	helperEnv        = "STICKYD_BUNDLE_TEST_HELPER"
	helperArchiveEnv = "STICKYD_BUNDLE_TEST_ARCHIVE"
	helperCacheEnv   = "STICKYD_BUNDLE_TEST_CACHE"
	helperDigestEnv  = "STICKYD_BUNDLE_TEST_DIGEST"
	helperProbeEnv   = "STICKYD_BUNDLE_TEST_PROBE"
)

// TestOpenWithoutNetwork proves that opening a bundle needs neither network
// nor a writable archive. It re-executes this test binary under
// `unshare --net --mount --map-root-user`: in that namespace there is no
// network (a listener of this process cannot be reached), and the helper
// bind-mounts the archive directory read-only, so no write to it can
// succeed, even as root. The helper opens the archive with ReadOnly (Put is
// refused), opens the bundle into an empty cache, runs its entry point and
// prints its output, which is checked here. Skipped, with the reason, where
// unshare is missing or not permitted.
func TestOpenWithoutNetwork(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) is not installed, so no network-less namespace can be made")
	}
	nsArgs := []string{"--net", "--mount", "--map-root-user"}
	if out, err := exec.Command(unshare, append(nsArgs, "true")...).CombinedOutput(); err != nil {
		t.Skipf("unshare %s is not permitted here: %v: %s", strings.Join(nsArgs, " "), err, strings.TrimSpace(string(out)))
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	a, digest := dirArchiveWith(t)
	readOnlyDir(t, a.Dir()) // 0555, as an operator would; root ignores it
	before := dirNames(t, a.Dir())
	cache := filepath.Join(t.TempDir(), "cache")

	// Something the helper would reach if it had this process's network.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-accepted })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, unshare, append(nsArgs, self, "-test.run=^TestHelperNoNetwork$", "-test.v")...)
	cmd.Env = append(os.Environ(),
		helperEnv+"=1",
		helperArchiveEnv+"="+a.Dir(),
		helperCacheEnv+"="+cache,
		helperDigestEnv+"="+digest,
		helperProbeEnv+"="+ln.Addr().String(),
	)
	out, err := cmd.CombinedOutput()
	t.Logf("helper output:\n%s", out)
	if err != nil {
		t.Fatalf("helper in the network-less namespace failed: %v", err)
	}
	for _, want := range []string{
		"no network: dialing " + ln.Addr().String() + " failed",
		"archive mounted read-only: writing failed",
		"Put refused: ",
		fmt.Sprintf("entry said: %q", wantOutput),
	} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("helper output lacks %q", want)
		}
	}

	// Seen from here: the archive is as it was; the cache holds the bundle,
	// and it checks out.
	if after := dirNames(t, a.Dir()); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("archive changed: %v, was %v", after, before)
	}
	o, err := (&Cache{Dir: cache}).Open(context.Background(), digest)
	if err != nil {
		t.Fatalf("the copy unpacked without network: %v", err)
	}
	if got := runEntry(t, o); got != wantOutput {
		t.Fatalf("entry printed %q", got)
	}
}

// TestHelperNoNetwork is the helper process of TestOpenWithoutNetwork; run
// directly it does nothing.
func TestHelperNoNetwork(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	ctx := context.Background()
	dir, cache := os.Getenv(helperArchiveEnv), os.Getenv(helperCacheEnv)
	digest, probe := os.Getenv(helperDigestEnv), os.Getenv(helperProbeEnv)

	// No network: the parent's listener is out of reach, and there is no
	// interface but loopback.
	if c, err := net.DialTimeout("tcp", probe, 2*time.Second); err == nil {
		c.Close()
		t.Fatalf("reached %s: this namespace has network", probe)
	} else {
		fmt.Printf("no network: dialing %s failed: %v\n", probe, err)
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback == 0 {
			t.Fatalf("interface %s in the network-less namespace", ifc.Name)
		}
	}

	// A read-only archive, for root too.
	if err := bindReadOnly(dir); err != nil {
		t.Fatalf("mounting %s read-only: %v", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "probe"), []byte("x"), 0o644); err == nil {
		t.Fatal("wrote into the read-only archive")
	} else {
		fmt.Printf("archive mounted read-only: writing failed: %v\n", err)
	}

	a, err := OpenArchive(dir, ArchiveOptions{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Put(ctx, digest, strings.NewReader("")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put on a read-only archive: %v", err)
	} else {
		fmt.Printf("Put refused: %v\n", err)
	}
	c := &Cache{Dir: cache, Archive: a}
	o, err := c.Open(ctx, digest)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(o.EntryPath(), o.Manifest.Args...).CombinedOutput()
	if err != nil {
		t.Fatalf("running %s: %v\n%s", o.EntryPath(), err, out)
	}
	fmt.Printf("entry said: %q\n", out)
}

// bindReadOnly bind-mounts dir onto itself read-only, keeping the flags
// (nosuid, nodev...) that a user namespace may not drop.
func bindReadOnly(dir string) error {
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind mount: %w", err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	keep := uintptr(st.Flags) & (syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC |
		syscall.MS_NOATIME | syscall.MS_NODIRATIME | syscall.MS_RELATIME)
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY|keep, ""); err != nil {
		return fmt.Errorf("remount read-only: %w", err)
	}
	return nil
}
