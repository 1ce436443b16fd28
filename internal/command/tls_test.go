package command

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/cli"

	"github.com/stickyd/stickyd/internal/tlsutil"
)

// stickyd tls makes a CA and certificates that tlsutil takes, numbers
// certificates, never overwrites, and refuses bad flags with a message.
func TestTLSCommands(t *testing.T) {
	dir := t.TempDir()
	run := func(want int, args ...string) string {
		t.Helper()
		ui := cli.NewMockUi()
		if code := RunWith(append(args, "-dir", dir), ui, nil); code != want {
			t.Fatalf("stickyd %v: exit %d, want %d\n%s%s", args, code, want, ui.OutputWriter, ui.ErrorWriter)
		}
		return ui.OutputWriter.String() + ui.ErrorWriter.String()
	}
	run(0, "tls", "ca", "create", "-cluster", "eu")
	if out := run(1, "tls", "ca", "create"); !strings.Contains(out, "exists: not overwritten") {
		t.Fatalf("a second CA: %s", out)
	}
	ca, key := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	cert := func(args ...string) []string {
		return append([]string{"tls", "cert", "create", "-ca", ca, "-key", key, "-cluster", "eu"}, args...)
	}
	if out := run(0, cert("-server")...); !strings.Contains(out, "eu-server-stickyd-0.pem") || !strings.Contains(out, "server.eu.stickyd") {
		t.Fatalf("a server certificate: %s", out)
	}
	if out := run(0, cert("-server", "-additional-ipaddress", "10.0.0.7")...); !strings.Contains(out, "eu-server-stickyd-1.pem") {
		t.Fatalf("a second server certificate: %s", out)
	}
	run(0, cert("-host")...)
	for _, bad := range [][]string{cert(), cert("-server", "-host"), cert("-server", "-days", "0"), cert("-host", "-additional-ipaddress", "nope")} {
		if out := run(1, bad...); out == "" {
			t.Fatalf("%v: no message", bad)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "eu-host-stickyd-0-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the host key: %v %v", err, st)
	}
	for _, c := range []struct {
		base string
		role tlsutil.Role
	}{{"eu-server-stickyd-1", tlsutil.RoleServer}, {"eu-host-stickyd-0", tlsutil.RoleHost}} {
		m, err := tlsutil.New(tlsutil.Config{CAFile: ca, CertFile: filepath.Join(dir, c.base+".pem"), KeyFile: filepath.Join(dir, c.base+"-key.pem"), Cluster: "eu"})
		if err != nil {
			t.Fatal(err)
		}
		if !m.Has(c.role) {
			t.Fatalf("%s does not name a %s", c.base, c.role)
		}
	}
}
