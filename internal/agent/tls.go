package agent

import (
	"fmt"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/stickyd/stickyd/internal/tlsutil"
)

// startTLS loads the tls block's files and checks that this agent's
// certificate names its role; every refused peer is logged and counted.
func (a *Agent) startTLS() error {
	m, err := tlsutil.New(a.cfg.TLS.tlsutil())
	if err != nil {
		return err
	}
	role := tlsutil.RoleHost
	if a.cfg.IsServer() {
		role = tlsutil.RoleServer
	}
	if !m.Has(role) {
		return fmt.Errorf("tls: cert_file %s does not name this agent's role: a %s needs a certificate for %s (stickyd tls cert create -%s)",
			a.cfg.TLS.CertFile, role, tlsutil.Name(role, m.Cluster()), role)
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_tls_refused_total",
		Help: "Connections to the raft and peer-link ports refused by mutual TLS, by listener and reason (no_certificate, unknown_authority, wrong_role, handshake).",
	}, []string{"listener", "reason"})
	for _, l := range []string{"raft", "rpc"} {
		for _, r := range []string{tlsutil.ReasonNoCertificate, tlsutil.ReasonUnknownCA, tlsutil.ReasonWrongRole, tlsutil.ReasonHandshake} {
			refused.WithLabelValues(l, r)
		}
	}
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stickyd_tls_certificate_expiry_seconds",
		Help: "When this agent's certificate expires (Unix time).",
	}, func() float64 { return float64(m.NotAfter().Unix()) })
	if err := a.registry.Register(refused); err != nil {
		return err
	}
	if err := a.registry.Register(expiry); err != nil {
		return err
	}
	log := a.log.Named("tls")
	// Every refusal is counted; the log takes the first ten and then one
	// a second, so a stranger knocking in a loop cannot flood it.
	sample := &rate.Sometimes{First: 10, Interval: time.Second}
	m.OnRefuse = func(listener, reason string, remote net.Addr, err error) {
		refused.WithLabelValues(listener, reason).Inc()
		sample.Do(func() {
			log.Warn("refused a connection (sampled; stickyd_tls_refused_total counts them all)",
				"listener", listener, "remote", remote.String(), "reason", reason, "error", err)
		})
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
