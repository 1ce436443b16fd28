package agent

import (
	"github.com/stickyd/stickyd/internal/tlsutil"
)

// startTLS loads the tls block's files for this agent's role.
func (a *Agent) startTLS() error {
	role := tlsutil.RoleHost
	if a.cfg.IsServer() {
		role = tlsutil.RoleServer
	}
	m, err := tlsutil.Start(a.cfg.TLS.tlsutil(), role, a.registry, a.log.Named("tls"))
	if err != nil {
		return err
	}
	a.tls = m
	return nil
}

// ReloadTLS reads the tls block's certificate, key and CA again (SIGHUP);
// open connections keep theirs, the next handshakes use the new ones. On
// an error the current ones stay.
func (a *Agent) ReloadTLS() error {
	if a.tls == nil {
		return nil
	}
	if err := a.tls.Reload(); err != nil {
		return err
	}
	a.log.Info("reloaded the TLS certificates", "cert_file", a.cfg.TLS.CertFile, "expires", a.tls.NotAfter())
	return nil
}
