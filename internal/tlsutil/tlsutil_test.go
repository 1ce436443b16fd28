package tlsutil

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// files writes a certificate of role signed by ca and returns a Config
// naming them.
func files(t *testing.T, ca PEM, role Role, cluster string) Config {
	t.Helper()
	dir := t.TempDir()
	c, err := CreateCert(ca, CertRequest{Role: role, Cluster: cluster, Days: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{CAFile: filepath.Join(dir, "ca.pem"), CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem"),
		Cluster: cluster, VerifyIncoming: true, VerifyOutgoing: true, VerifyServerHostname: true}
	for f, b := range map[string][]byte{cfg.CAFile: ca.Cert, cfg.CertFile: c.Cert, cfg.KeyFile: c.Key} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return cfg
}

func newCA(t *testing.T) PEM {
	t.Helper()
	ca, err := CreateCA("global", 2)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func manager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

type refusals struct {
	mu      sync.Mutex
	reasons []string
}

func (r *refusals) add(_, reason string, _ net.Addr, _ error) {
	r.mu.Lock()
	r.reasons = append(r.reasons, reason)
	r.mu.Unlock()
}

func (r *refusals) last(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		n := len(r.reasons)
		var s string
		if n > 0 {
			s = r.reasons[n-1]
			r.reasons = nil
		}
		r.mu.Unlock()
		if n > 0 {
			return s
		}
		time.Sleep(10 * time.Millisecond)
	}
	return ""
}

// echo serves ln, echoing each connection.
func echo(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

func roundTrip(c net.Conn) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	const msg = "ping, are you there?"
	if _, err := c.Write([]byte(msg)); err != nil {
		return err
	}
	b := make([]byte, len(msg))
	if _, err := io.ReadFull(c, b); err != nil {
		return err
	}
	if string(b) != msg {
		return errors.New("bad echo")
	}
	return nil
}

// A listener for servers takes a server of the cluster and refuses a host,
// a certificate of another CA, a peer without a certificate and one that
// does not speak TLS, each counted with its reason; a dialer that expects a
// server refuses a host.
func TestListenerAcceptsOnlyItsRoles(t *testing.T) {
	ca := newCA(t)
	server := manager(t, files(t, ca, RoleServer, "global"))
	var refused refusals
	server.OnRefuse = refused.add
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := server.Listener(raw, "raft", RoleServer)
	defer ln.Close()
	go echo(ln)
	addr := ln.Addr().String()
	ctx := t.Context()

	peer := manager(t, files(t, ca, RoleServer, "global"))
	c, err := peer.Dial(ctx, addr, RoleServer)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c); err != nil {
		t.Fatalf("a server of the cluster: %v", err)
	}

	attempt := func(name string, dial func() (net.Conn, error), want string) {
		t.Helper()
		c, err := dial()
		if err == nil {
			err = roundTrip(c)
		}
		if err == nil {
			t.Fatalf("%s: served", name)
		}
		if got := refused.last(t); got != want {
			t.Fatalf("%s: refused as %q, want %q", name, got, want)
		}
	}
	host := manager(t, files(t, ca, RoleHost, "global"))
	attempt("a host", func() (net.Conn, error) { return host.Dial(ctx, addr, RoleServer) }, ReasonWrongRole)
	other := manager(t, files(t, newCA(t), RoleServer, "global"))
	other.cfg.VerifyOutgoing = false // a rogue that does not care who it talks to
	attempt("another CA's server", func() (net.Conn, error) { return other.Dial(ctx, addr, RoleServer) }, ReasonUnknownCA)
	otherCluster := manager(t, files(t, ca, RoleServer, "other"))
	otherCluster.cfg.VerifyOutgoing = false
	attempt("a server of another cluster", func() (net.Conn, error) { return otherCluster.Dial(ctx, addr, RoleServer) }, ReasonWrongRole)
	attempt("no certificate", func() (net.Conn, error) {
		return tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
	}, ReasonNoCertificate)
	attempt("plain TCP", func() (net.Conn, error) { return net.Dial("tcp", addr) }, ReasonHandshake)

	// The dialer's side: a listener holding a host certificate is not a
	// server.
	rawHost, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hostLn := host.Listener(rawHost, "rpc", RoleServer, RoleHost)
	defer hostLn.Close()
	go echo(hostLn)
	c, err = peer.Dial(ctx, hostLn.Addr().String(), RoleServer)
	if err == nil {
		err = roundTrip(c)
	}
	var re *RefusedError
	if !errors.As(err, &re) || re.Reason != ReasonWrongRole {
		t.Fatalf("dialing a host as a server: %v", err)
	}
	c, err = peer.Dial(ctx, hostLn.Addr().String(), RoleServer, RoleHost)
	if err != nil {
		t.Fatal(err)
	}
	if err := roundTrip(c); err != nil {
		t.Fatalf("dialing a host as a host: %v", err)
	}
}

// A reload takes a new certificate and CA for the next handshakes; a
// reload of damaged files keeps the current ones.
func TestReload(t *testing.T) {
	ca := newCA(t)
	cfg := files(t, ca, RoleServer, "global")
	m := manager(t, cfg)
	before := m.cur.Load().leaf.SerialNumber
	ca2 := newCA(t)
	next := files(t, ca2, RoleServer, "global")
	for _, f := range [][2]string{{next.CAFile, cfg.CAFile}, {next.CertFile, cfg.CertFile}, {next.KeyFile, cfg.KeyFile}} {
		b, _ := os.ReadFile(f[0])
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Reload(); err != nil {
		t.Fatal(err)
	}
	if m.cur.Load().leaf.SerialNumber.Cmp(before) == 0 {
		t.Fatal("the certificate did not change")
	}
	// A peer of the old CA is now refused, one of the new taken.
	raw, _ := net.Listen("tcp", "127.0.0.1:0")
	ln := m.Listener(raw, "raft", RoleServer)
	defer ln.Close()
	go echo(ln)
	old := manager(t, files(t, ca, RoleServer, "global"))
	old.cfg.VerifyOutgoing = false
	if c, err := old.Dial(context.Background(), ln.Addr().String(), RoleServer); err == nil && roundTrip(c) == nil {
		t.Fatal("a peer of the old CA was served after the reload")
	}
	fresh := manager(t, files(t, ca2, RoleServer, "global"))
	c, err := fresh.Dial(context.Background(), ln.Addr().String(), RoleServer)
	if err != nil || roundTrip(c) != nil {
		t.Fatalf("a peer of the new CA: %v", err)
	}
	// Damaged: refused, the current material kept.
	if err := os.WriteFile(cfg.CertFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	serial := m.cur.Load().leaf.SerialNumber
	if err := m.Reload(); err == nil {
		t.Fatal("a damaged certificate reloaded")
	}
	if m.cur.Load().leaf.SerialNumber.Cmp(serial) != 0 {
		t.Fatal("a failed reload changed the certificate")
	}
}

// New refuses a certificate that the CA did not sign, and missing files.
func TestNewRefusesMismatch(t *testing.T) {
	cfg := files(t, newCA(t), RoleServer, "global")
	other := files(t, newCA(t), RoleServer, "global")
	cfg.CAFile = other.CAFile
	if _, err := New(cfg); err == nil {
		t.Fatal("a certificate of another CA was taken")
	}
	if _, err := New(Config{CAFile: cfg.CAFile}); err == nil {
		t.Fatal("a config without cert_file was taken")
	}
	m := manager(t, files(t, newCA(t), RoleHost, "eu"))
	if !m.Has(RoleHost) || m.Has(RoleServer) || m.Cluster() != "eu" {
		t.Fatal("Has does not read the certificate's role")
	}
}
