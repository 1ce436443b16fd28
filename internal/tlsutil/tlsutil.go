// Package tlsutil is mutual TLS between stickyd processes: the raft port and
// the peer-link port accept only peers holding a certificate from the
// cluster's CA that names the role they need (server.<cluster>.stickyd or
// host.<cluster>.stickyd), in the manner of Consul's and Nomad's tls block.
// Certificates and the CA are read at start and again at each Reload
// (SIGHUP), without dropping the connections already open.
package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Role is what a certificate lets its holder be in a cluster.
type Role string

// The roles: a server is a raft voter and supervisor; a host runs workers
// and holds a replica of the maps, and never leads.
const (
	RoleServer Role = "server"
	RoleHost   Role = "host"
)

// Name is the DNS name a certificate of role carries in cluster.
func Name(role Role, cluster string) string { return string(role) + "." + cluster + ".stickyd" }

// DefaultCluster is the cluster name when none is given (Nomad's "global").
const DefaultCluster = "global"

// HandshakeTimeout bounds a TLS handshake on an accepted connection.
const HandshakeTimeout = 10 * time.Second

// Config is what the tls block says.
type Config struct {
	CAFile, CertFile, KeyFile string
	// Cluster names the cluster in the role names (default "global").
	Cluster string
	// VerifyIncoming requires a certificate of the right role from every
	// peer that connects; VerifyOutgoing checks the chain of every peer
	// dialed; VerifyServerHostname checks its role too.
	VerifyIncoming, VerifyOutgoing, VerifyServerHostname bool
}

// Reasons a peer is refused, as counted.
const (
	ReasonNoCertificate = "no_certificate"
	ReasonUnknownCA     = "unknown_authority"
	ReasonWrongRole     = "wrong_role"
	ReasonHandshake     = "handshake"
)

// RefusedError is a peer's certificate refused.
type RefusedError struct {
	Reason string
	Err    error
}

func (e *RefusedError) Error() string { return e.Err.Error() }
func (e *RefusedError) Unwrap() error { return e.Err }

// Manager holds the current certificate and CA and builds the TLS
// configurations of the listeners and dialers; its methods are safe for
// concurrent use.
type Manager struct {
	cfg Config
	cur atomic.Pointer[material]
	// OnRefuse, if set, is told of every refused connection (before use).
	OnRefuse func(listener, reason string, remote net.Addr, err error)
}

type material struct {
	cert  *tls.Certificate
	leaf  *x509.Certificate
	roots *x509.CertPool
}

// New loads cfg's files.
func New(cfg Config) (*Manager, error) {
	if cfg.CAFile == "" || cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("tls: ca_file, cert_file and key_file are all required")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = DefaultCluster
	}
	m := &Manager{cfg: cfg}
	if err := m.Reload(); err != nil {
		return nil, err
	}
	return m, nil
}

// Cluster is the cluster's name in role names.
func (m *Manager) Cluster() string { return m.cfg.Cluster }

// Reload reads the files again; on an error the current ones stay.
func (m *Manager) Reload() error {
	ca, err := os.ReadFile(m.cfg.CAFile)
	if err != nil {
		return fmt.Errorf("tls: reading ca_file: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return fmt.Errorf("tls: ca_file %s holds no PEM certificate", m.cfg.CAFile)
	}
	cert, err := tls.LoadX509KeyPair(m.cfg.CertFile, m.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("tls: loading cert_file and key_file: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("tls: parsing cert_file: %w", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: intermediates(cert.Certificate[1:]),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return fmt.Errorf("tls: cert_file %s is not signed by ca_file %s: %w", m.cfg.CertFile, m.cfg.CAFile, err)
	}
	m.cur.Store(&material{cert: &cert, leaf: leaf, roots: roots})
	return nil
}

func intermediates(ders [][]byte) *x509.CertPool {
	p := x509.NewCertPool()
	for _, d := range ders {
		if c, err := x509.ParseCertificate(d); err == nil {
			p.AddCert(c)
		}
	}
	return p
}

// Has says whether this process's certificate carries role.
func (m *Manager) Has(role Role) bool {
	return m.cur.Load().leaf.VerifyHostname(Name(role, m.cfg.Cluster)) == nil
}

// NotAfter is when this process's certificate expires.
func (m *Manager) NotAfter() time.Time { return m.cur.Load().leaf.NotAfter }

// verify checks a peer's chain against the cluster's CA and, if roles is
// not empty, that its certificate names one of them.
func (m *Manager) verify(certs []*x509.Certificate, usage x509.ExtKeyUsage, roles []Role) error {
	if len(certs) == 0 {
		return &RefusedError{ReasonNoCertificate, errors.New("the peer sent no certificate")}
	}
	mat := m.cur.Load()
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: mat.roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return &RefusedError{ReasonUnknownCA, fmt.Errorf("the peer's certificate is not the cluster's: %w", err)}
	}
	if len(roles) == 0 {
		return nil
	}
	for _, r := range roles {
		if certs[0].VerifyHostname(Name(r, m.cfg.Cluster)) == nil {
			return nil
		}
	}
	want := make([]string, len(roles))
	for i, r := range roles {
		want[i] = Name(r, m.cfg.Cluster)
	}
	return &RefusedError{ReasonWrongRole, fmt.Errorf("the peer's certificate (%s, names %v) is not a %s",
		certs[0].Subject.CommonName, certs[0].DNSNames, strings.Join(want, " or "))}
}

// ServerTLS is the configuration of a listener that accepts peers of the
// given roles (any certificate of the cluster when VerifyIncoming is off,
// none required).
func (m *Manager) ServerTLS(accept ...Role) *tls.Config {
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"}, // gRPC's peer links ask for it
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.cur.Load().cert, nil
		},
	}
	if !m.cfg.VerifyIncoming {
		return c
	}
	// The chain is checked here, against the CA of the moment (a reload
	// changes it for the next handshake).
	c.ClientAuth = tls.RequestClientCert // a missing one is refused below, counted
	accept = slices.Clone(accept)
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		return m.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth, accept)
	}
	return c
}

// HTTPSServerTLS is the configuration of the admin API's HTTPS listener:
// this process's certificate, and no client certificate asked for (the
// API's token is the caller's proof; the CLI has no certificate).
func (m *Manager) HTTPSServerTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return m.cur.Load().cert, nil
		},
	}
}

// ClientTLS is the configuration of a dialer to a peer of one of the given
// roles.
func (m *Manager) ClientTLS(expect ...Role) *tls.Config {
	expect = slices.Clone(expect)
	c := &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain and the role are checked in VerifyConnection, against
		// the CA of the moment; the address is not a name to check.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return m.cur.Load().cert, nil
		},
	}
	if m.cfg.VerifyOutgoing {
		roles := expect
		if !m.cfg.VerifyServerHostname {
			roles = nil
		}
		c.VerifyConnection = func(cs tls.ConnectionState) error {
			return m.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, roles)
		}
	}
	return c
}

// Listener wraps ln: each accepted connection is a TLS server connection
// that accepts peers of the given roles, its handshake done (bounded by
// HandshakeTimeout) at its first read or write; a refused one is counted
// under name.
func (m *Manager) Listener(ln net.Listener, name string, accept ...Role) net.Listener {
	return &listener{Listener: ln, m: m, name: name, cfg: m.ServerTLS(accept...)}
}

type listener struct {
	net.Listener
	m    *Manager
	name string
	cfg  *tls.Config
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{Conn: tls.Server(c, l.cfg), l: l}, nil
}

type conn struct {
	*tls.Conn
	l    *listener
	once sync.Once
	err  error
}

func (c *conn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
		defer cancel()
		if c.err = c.Conn.HandshakeContext(ctx); c.err != nil {
			reason := ReasonHandshake
			var re *RefusedError
			if errors.As(c.err, &re) {
				reason = re.Reason
			}
			if c.l.m.OnRefuse != nil {
				c.l.m.OnRefuse(c.l.name, reason, c.RemoteAddr(), c.err)
			}
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *conn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

func (c *conn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// Dial opens a TLS connection to a peer of one of the given roles.
func (m *Manager) Dial(ctx context.Context, addr string, expect ...Role) (net.Conn, error) {
	d := &tls.Dialer{Config: m.ClientTLS(expect...)}
	return d.DialContext(ctx, "tcp", addr)
}
