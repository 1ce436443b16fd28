package tlsutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// An agent (Start) refuses to start with a certificate that does not name its
// role, or files that do not belong together, saying which.
func TestTLSStartRefusesTheWrongCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, err := CreateCA("global", 1)
	if err != nil {
		t.Fatal(err)
	}
	host, err := CreateCert(ca, CertRequest{Role: RoleHost, Days: 1})
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
	cfg := Config{CAFile: write("ca.pem", ca.Cert), CertFile: write("host.pem", host.Cert), KeyFile: write("host-key.pem", host.Key)}
	_, err = Start(cfg, RoleServer, prometheus.NewRegistry(), hclog.NewNullLogger())
	if err == nil || !strings.Contains(err.Error(), "server.global.stickyd") || !strings.Contains(err.Error(), "-server") {
		t.Fatalf("a server with a host certificate: %v", err)
	}
	other, _ := CreateCA("global", 1)
	cfg.CAFile = write("other.pem", other.Cert)
	if _, err := Start(cfg, RoleServer, prometheus.NewRegistry(), hclog.NewNullLogger()); err == nil || !strings.Contains(err.Error(), "not signed by") {
		t.Fatalf("a certificate of another CA: %v", err)
	}
}
