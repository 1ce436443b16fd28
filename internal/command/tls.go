package command

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/stickyd/stickyd/internal/tlsutil"
)

// Where `stickyd tls` writes, Consul's names with stickyd's.
const (
	caCertFile = "stickyd-agent-ca.pem"
	caKeyFile  = "stickyd-agent-ca-key.pem"
)

// TLSCommand is the parent of the tls subcommands; alone it prints their
// list.
type TLSCommand struct{ Meta }

func (c *TLSCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd tls <subcommand> [options]

  Makes the certificates of a cluster's mutual TLS (the tls block of the
  agent's configuration; docs/security.md), as "consul tls" does: a CA,
  then a certificate per agent naming its role, server or host.

      $ stickyd tls ca create
      $ stickyd tls cert create -server
      $ stickyd tls cert create -host

  Run "stickyd tls <subcommand> -help" for the options of each.
`)
}

func (c *TLSCommand) Synopsis() string { return "Make the certificates of a cluster's mutual TLS" }

func (c *TLSCommand) Run(args []string) int { return c.parent("tls", args) }

// TLSCACommand is the parent of tls ca create.
type TLSCACommand struct{ Meta }

func (c *TLSCACommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd tls ca <subcommand> [options]

  Subcommands: create (a new cluster CA).
`)
}

func (c *TLSCACommand) Synopsis() string { return "Make a cluster's certificate authority" }

func (c *TLSCACommand) Run(args []string) int { return c.parent("tls ca", args) }

// TLSCACreateCommand writes a new CA.
type TLSCACreateCommand struct{ Meta }

func (c *TLSCACreateCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd tls ca create [options]

  Writes a new certificate authority for a cluster's mutual TLS:
  ` + caCertFile + ` (give it to every agent as ca_file) and
  ` + caKeyFile + ` (keep it secret: it signs the agents' certificates;
  written 0600). Existing files are never overwritten.

Options:

  -cluster=global  The cluster's name, as in the agents' tls block.
  -days=1825       How long the CA is valid.
  -dir=.           Where the files are written.
`)
}

func (c *TLSCACreateCommand) Synopsis() string { return "Make a new cluster CA" }

func (c *TLSCACreateCommand) Run(args []string) int {
	fs := flag.NewFlagSet("tls ca create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cluster := fs.String("cluster", tlsutil.DefaultCluster, "")
	days := fs.Int("days", 1825, "")
	dir := fs.String("dir", ".", "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	if *days <= 0 {
		return c.fail(errors.New("-days must be at least 1"))
	}
	ca, err := tlsutil.CreateCA(*cluster, *days)
	if err != nil {
		return c.fail(fmt.Errorf("creating the CA: %w", err))
	}
	cert, key := filepath.Join(*dir, caCertFile), filepath.Join(*dir, caKeyFile)
	if err := writePair(cert, key, ca); err != nil {
		return c.fail(err)
	}
	c.UI.Output(fmt.Sprintf("==> Saved %s\n==> Saved %s", cert, key))
	return 0
}

// TLSCertCommand is the parent of tls cert create.
type TLSCertCommand struct{ Meta }

func (c *TLSCertCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd tls cert <subcommand> [options]

  Subcommands: create (a server's or a host's certificate).
`)
}

func (c *TLSCertCommand) Synopsis() string { return "Make an agent's certificate" }

func (c *TLSCertCommand) Run(args []string) int { return c.parent("tls cert", args) }

// TLSCertCreateCommand writes an agent's certificate signed by the CA.
type TLSCertCreateCommand struct{ Meta }

func (c *TLSCertCreateCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd tls cert create (-server | -host) [options]

  Writes a certificate signed by the cluster's CA for a server (a raft
  voter: server.<cluster>.stickyd) or a host (runs workers, never votes:
  host.<cluster>.stickyd), usable to serve and to dial, with localhost and
  127.0.0.1 beside its role's name. The files are named
  <cluster>-<role>-stickyd-<n>.pem and -key.pem (0600), n the first free
  number; existing files are never overwritten.

Options:

  -server, -host             The role (one of them is required).
  -cluster=global            The cluster's name.
  -ca=FILE                   The CA's certificate (default
                             ` + caCertFile + `).
  -key=FILE                  The CA's key (default ` + caKeyFile + `).
  -days=365                  How long the certificate is valid (at most as
                             long as the CA).
  -additional-dnsname=NAME   Another DNS name (repeatable).
  -additional-ipaddress=IP   Another IP address (repeatable).
  -dir=.                     Where the files are written.
`)
}

func (c *TLSCertCreateCommand) Synopsis() string { return "Make a server's or a host's certificate" }

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func (c *TLSCertCreateCommand) Run(args []string) int {
	fs := flag.NewFlagSet("tls cert create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	server := fs.Bool("server", false, "")
	hostRole := fs.Bool("host", false, "")
	cluster := fs.String("cluster", tlsutil.DefaultCluster, "")
	caFile := fs.String("ca", caCertFile, "")
	keyFile := fs.String("key", caKeyFile, "")
	days := fs.Int("days", 365, "")
	dir := fs.String("dir", ".", "")
	var dns, ips listFlag
	fs.Var(&dns, "additional-dnsname", "")
	fs.Var(&ips, "additional-ipaddress", "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	var role tlsutil.Role
	switch {
	case *server && *hostRole:
		return c.fail(errors.New("give one of -server and -host, not both"))
	case *server:
		role = tlsutil.RoleServer
	case *hostRole:
		role = tlsutil.RoleHost
	default:
		return c.fail(fmt.Errorf("give -server or -host\n\n%s", c.Help()))
	}
	if *days <= 0 {
		return c.fail(errors.New("-days must be at least 1"))
	}
	req := tlsutil.CertRequest{Role: role, Cluster: *cluster, Days: *days, DNSNames: dns}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return c.fail(fmt.Errorf("-additional-ipaddress: %q is not an IP address", s))
		}
		req.IPs = append(req.IPs, ip)
	}
	var ca tlsutil.PEM
	var err error
	if ca.Cert, err = os.ReadFile(*caFile); err != nil {
		return c.fail(fmt.Errorf("reading the CA certificate (-ca; make one with stickyd tls ca create): %w", err))
	}
	if ca.Key, err = os.ReadFile(*keyFile); err != nil {
		return c.fail(fmt.Errorf("reading the CA key (-key): %w", err))
	}
	pair, err := tlsutil.CreateCert(ca, req)
	if err != nil {
		return c.fail(fmt.Errorf("creating the certificate: %w", err))
	}
	for n := 0; ; n++ {
		base := filepath.Join(*dir, *cluster+"-"+string(role)+"-stickyd-"+strconv.Itoa(n))
		cert, key := base+".pem", base+"-key.pem"
		if _, err := os.Stat(cert); err == nil {
			continue
		}
		if err := writePair(cert, key, pair); err != nil {
			return c.fail(err)
		}
		c.UI.Output(fmt.Sprintf("==> Using %s and %s\n==> Saved %s\n==> Saved %s\n    (%s)",
			*caFile, *keyFile, cert, key, tlsutil.Name(role, *cluster)))
		return 0
	}
}

// writePair writes a certificate (0644) and its key (0600), refusing to
// overwrite either.
func writePair(certPath, keyPath string, p tlsutil.PEM) error {
	for _, f := range []string{certPath, keyPath} {
		if _, err := os.Stat(f); err == nil {
			return fmt.Errorf("%s exists: not overwritten", f)
		}
	}
	if err := writeNew(keyPath, p.Key, 0o600); err != nil {
		return err
	}
	if err := writeNew(certPath, p.Cert, 0o644); err != nil {
		os.Remove(keyPath)
		return err
	}
	return nil
}

func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
