package tlsutil

import (
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

// Start loads cfg's files for an agent of role and checks that its
// certificate names the role; every refused peer is logged (sampled) and
// counted in reg.
func Start(cfg Config, role Role, reg prometheus.Registerer, log hclog.Logger) (*Manager, error) {
	m, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if !m.Has(role) {
		return nil, fmt.Errorf("tls: cert_file %s does not name this agent's role: a %s needs a certificate for %s (stickyd tls cert create -%s)",
			cfg.CertFile, role, Name(role, m.Cluster()), role)
	}
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "stickyd_tls_refused_total",
		Help: "Connections to the raft and peer-link ports refused by mutual TLS, by listener and reason (no_certificate, unknown_authority, wrong_role, handshake).",
	}, []string{"listener", "reason"})
	for _, l := range []string{"raft", "rpc"} {
		for _, r := range []string{ReasonNoCertificate, ReasonUnknownCA, ReasonWrongRole, ReasonHandshake} {
			refused.WithLabelValues(l, r)
		}
	}
	expiry := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stickyd_tls_certificate_expiry_seconds",
		Help: "When this agent's certificate expires (Unix time).",
	}, func() float64 { return float64(m.NotAfter().Unix()) })
	if err := reg.Register(refused); err != nil {
		return nil, err
	}
	if err := reg.Register(expiry); err != nil {
		return nil, err
	}
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
	return m, nil
}
