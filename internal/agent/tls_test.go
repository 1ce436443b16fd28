package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stickyd/stickyd/internal/tlsutil"
)

// An agent refuses to start with a certificate that does not name its
// role, or files that do not belong together, saying which.
func TestTLSStartRefusesTheWrongCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := tlsutil.CreateCA("global", 1)
	if err != nil {
		t.Fatal(err)
	}
	host, err := tlsutil.CreateCert(ca, tlsutil.CertRequest{Role: tlsutil.RoleHost, Days: 1})
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := &TLSConfig{CAFile: write("ca.pem", ca.Cert), CertFile: write("host.pem", host.Cert), KeyFile: write("host-key.pem", host.Key)}
	a := &Agent{cfg: &Config{TLS: cfg, Server: &ServerConfig{}}}
	err = a.startTLS()
	if err == nil || !strings.Contains(err.Error(), "server.global.stickyd") || !strings.Contains(err.Error(), "-server") {
		t.Fatalf("a server with a host certificate: %v", err)
	}
	other, _ := tlsutil.CreateCA("global", 1)
	cfg.CAFile = write("other.pem", other.Cert)
	if err := a.startTLS(); err == nil || !strings.Contains(err.Error(), "not signed by") {
		t.Fatalf("a certificate of another CA: %v", err)
	}
}
