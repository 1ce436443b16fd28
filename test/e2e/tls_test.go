package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// tlsCLI runs `stickyd tls ARGS` (this binary as stickyd) in dir.
func tlsCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	exe, _ := os.Executable()
	cmd := exec.Command(exe, append([]string{"tls"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), agentEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("stickyd tls %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// clusterTLS makes a CA and one server certificate with `stickyd tls`, as
// an operator does, and returns the agents' tls block naming them.
func clusterTLS(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	tlsCLI(t, dir, "ca", "create")
	tlsCLI(t, dir, "cert", "create", "-server")
	return fmt.Sprintf("tls {\n  ca_file   = %q\n  cert_file = %q\n  key_file  = %q\n}\n",
		filepath.Join(dir, "stickyd-agent-ca.pem"), filepath.Join(dir, "global-server-stickyd-0.pem"), filepath.Join(dir, "global-server-stickyd-0-key.pem"))
}

// certPair loads a certificate and key written by stickyd tls.
func certPair(t *testing.T, dir, base string) tls.Certificate {
	t.Helper()
	c, err := tls.LoadX509KeyPair(filepath.Join(dir, base+".pem"), filepath.Join(dir, base+"-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// selfSigned is a certificate naming the server role, signed by itself.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "server.global.stickyd"},
		DNSNames: []string{"server.global.stickyd"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// configAddr reads an address setting from a proc's configuration file.
func configAddr(t *testing.T, p *proc, key string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.dir, "stickyd.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(key + `\s*=\s*"([^"]+)"`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no %s in %s", key, p.dir)
	}
	return string(m[1])
}

// rogueStream is raft's stream layer for an attacker: plain TCP, or TLS
// with whatever certificate it holds.
type rogueStream struct {
	net.Listener
	tls *tls.Config // nil: plain TCP
}

func (s *rogueStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if s.tls == nil {
		return net.DialTimeout("tcp", string(addr), timeout)
	}
	return tls.DialWithDialer(&net.Dialer{Timeout: timeout}, "tcp", string(addr), s.tls)
}

func (s *rogueStream) Addr() net.Addr { return s.Listener.Addr() }

// rogueRaft sends the raft requests of the attacks on the raft port: an
// append of a forged entry a term above the cluster's, and a vote request.
func rogueRaft(t *testing.T, target string, cfg *tls.Config) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: &rogueStream{Listener: ln, tls: cfg}, MaxPool: 1, Timeout: 5 * time.Second})
	defer tr.Close()
	var resp raft.AppendEntriesResponse
	err = tr.AppendEntries("rogue", raft.ServerAddress(target), &raft.AppendEntriesRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("rogue"), Addr: []byte(ln.Addr().String())},
		Term:      1 << 20, PrevLogEntry: 0, PrevLogTerm: 0, LeaderCommitIndex: 0,
		Entries: []*raft.Log{{Index: 1 << 20, Term: 1 << 20, Type: raft.LogCommand, Data: []byte("forged")}},
	}, &resp)
	if err == nil {
		return fmt.Errorf("the append was answered (success %v, term %d)", resp.Success, resp.Term)
	}
	var vote raft.RequestVoteResponse
	if err := tr.RequestVote("rogue", raft.ServerAddress(target), &raft.RequestVoteRequest{
		RPCHeader: raft.RPCHeader{ID: []byte("rogue"), Addr: []byte(ln.Addr().String())}, Term: 1 << 21, LastLogIndex: 1 << 30, LastLogTerm: 1 << 20,
	}, &vote); err == nil {
		return fmt.Errorf("the vote request was answered (granted %v)", vote.Granted)
	}
	return nil
}

// roguePeerLink opens a connection to a peer-link port and speaks HTTP/2's
// preface, as gRPC would; it reports an error if anything answers.
func roguePeerLink(target string, cfg *tls.Config) error {
	var c net.Conn
	var err error
	if cfg == nil {
		c, err = net.DialTimeout("tcp", target, 5*time.Second)
	} else {
		cfg = cfg.Clone()
		cfg.NextProtos = []string{"h2"}
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", target, cfg)
	}
	if err != nil {
		return nil // refused at the handshake
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		return nil
	}
	b := make([]byte, 9)
	if _, err := io.ReadFull(bufio.NewReader(c), b); err == nil {
		return fmt.Errorf("the peer link answered an HTTP/2 frame %x", b)
	}
	return nil
}

// refusedCounts reads stickyd_tls_refused_total from a server's metrics.
func refusedCounts(p *proc) map[string]int {
	_, body := adminCallAtQuiet(p.admin, "GET", "/metrics", "")
	out := map[string]int{}
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, "stickyd_tls_refused_total{") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		n, _ := strconv.ParseFloat(l[i+1:], 64)
		out[l[len("stickyd_tls_refused_total"):i]] = int(n)
	}
	return out
}

// A 3-server cluster with mutual TLS on (certificates from stickyd tls):
// people type through every front (their frames cross peer links to the
// workers of other servers), while a rogue raft node and a rogue peer-link
// client try, without a certificate, with a self-signed one, with a host's
// and with another CA's server certificate: every attempt is refused and
// counted, the leader and its term stay, every count goes on. Then the
// certificates are replaced and each server reloads them on SIGHUP while
// the people type: no request fails, and the new certificate is served.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	tlsCLI(t, dir, "ca", "create")
	tlsCLI(t, dir, "cert", "create", "-server")
	tlsCLI(t, dir, "cert", "create", "-host")
	other := t.TempDir()
	tlsCLI(t, other, "ca", "create")
	tlsCLI(t, other, "cert", "create", "-server")
	for _, f := range []string{"stickyd-agent-ca-key.pem", "global-server-stickyd-0-key.pem"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v, mode %v", f, err, st.Mode())
		}
	}
	block := fmt.Sprintf("tls {\n  ca_file   = %q\n  cert_file = %q\n  key_file  = %q\n}\n",
		filepath.Join(dir, "stickyd-agent-ca.pem"), filepath.Join(dir, "global-server-stickyd-0.pem"), filepath.Join(dir, "global-server-stickyd-0-key.pem"))
	ps := startThreeServers(t, block)
	var leader string
	waitFor(t, 30*time.Second, "a leader of three", func() bool {
		s, ok := status(t, ps[0])
		leader = s.Leader
		return ok && s.Leader != "" && len(s.Members) == 3
	})

	// Typists on every front, counting their answers and failures.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var typed, failed atomic.Int64
	var fails sync.Map
	for i, p := range ps {
		for k := range 2 {
			b := procBrowser(t, p)
			name := fmt.Sprintf("p%d%d", i, k)
			if code, body := b.do("POST", "/login?user="+name); code != 200 {
				t.Fatalf("login of %s: %d %s", name, code, body)
			}
			tb := b.openTab("p")
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					a, err := tb.tryOp(map[string]any{"op": "msg", "data": map[string]any{"op": "inc"}})
					if err != nil || a.Op != "reply" || a.Error != "" {
						failed.Add(1)
						fails.Store(name, fmt.Sprintf("%v %+v", err, a))
						return
					}
					typed.Add(1)
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
	}
	time.Sleep(500 * time.Millisecond)

	clusterServer := certPair(t, dir, "global-server-stickyd-0")
	attackers := []struct {
		name   string
		cfg    *tls.Config
		reason string
	}{
		{"no TLS", nil, "handshake"},
		{"TLS without a certificate", &tls.Config{InsecureSkipVerify: true}, "no_certificate"},
		{"a self-signed server certificate", &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{selfSigned(t)}}, "unknown_authority"},
		{"another CA's server certificate", &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{certPair(t, other, "global-server-stickyd-0")}}, "unknown_authority"},
		{"the cluster's host certificate", &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{certPair(t, dir, "global-host-stickyd-0")}}, "wrong_role"},
	}
	before := map[*proc]map[string]int{}
	for _, p := range ps {
		before[p] = refusedCounts(p)
	}
	for _, atk := range attackers {
		for i, p := range ps {
			if err := rogueRaft(t, configAddr(t, p, "raft_addr"), atk.cfg); err != nil {
				t.Errorf("raft port of s%d, %s: %v", i+1, atk.name, err)
			}
		}
		// Peer links take hosts: the host certificate is a member there.
		if atk.reason == "wrong_role" {
			continue
		}
		for i, p := range ps {
			if err := roguePeerLink(configAddr(t, p, "rpc_addr"), atk.cfg); err != nil {
				t.Errorf("peer-link port of s%d, %s: %v", i+1, atk.name, err)
			}
		}
	}
	// Every refusal counted, by listener and reason.
	for i, p := range ps {
		want := map[string]int{}
		for _, atk := range attackers {
			want[fmt.Sprintf(`{listener="raft",reason=%q}`, atk.reason)]++
			if atk.reason != "wrong_role" {
				want[fmt.Sprintf(`{listener="rpc",reason=%q}`, atk.reason)]++
			}
		}
		waitFor(t, 10*time.Second, fmt.Sprintf("s%d's refusals counted", i+1), func() bool {
			got := refusedCounts(p)
			for k, n := range want {
				if got[k]-before[p][k] < n {
					return false
				}
			}
			return true
		})
	}
	if s, _ := status(t, ps[0]); s.Leader != leader {
		t.Fatalf("the leader changed from %s to %s under the attacks", leader, s.Leader)
	}

	// Rotation: new server certificates, the same paths, SIGHUP each server.
	tlsCLI(t, dir, "cert", "create", "-server") // global-server-stickyd-1
	for _, ext := range []string{".pem", "-key.pem"} {
		b, err := os.ReadFile(filepath.Join(dir, "global-server-stickyd-1"+ext))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "global-server-stickyd-0"+ext), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rotated := certPair(t, dir, "global-server-stickyd-0")
	for _, p := range ps {
		if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	for i, p := range ps {
		waitFor(t, 10*time.Second, fmt.Sprintf("s%d serving its new certificate", i+1), func() bool {
			c, err := tls.Dial("tcp", configAddr(t, p, "rpc_addr"), &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{clusterServer}})
			if err != nil {
				return false
			}
			defer c.Close()
			cs := c.ConnectionState()
			return len(cs.PeerCertificates) > 0 && string(cs.PeerCertificates[0].Raw) == string(rotated.Certificate[0])
		})
	}
	// New links after the rotation: a new person on each front.
	for i, p := range ps {
		b := procBrowser(t, p)
		if code, body := b.do("POST", fmt.Sprintf("/login?user=late%d", i)); code != 200 {
			t.Fatalf("login after the rotation on s%d: %d %s", i+1, code, body)
		}
		b.openTab("p").send(map[string]any{"op": "inc"})
	}
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	fails.Range(func(k, v any) bool {
		t.Errorf("typist %s failed: %s", k, v)
		return true
	})
	if failed.Load() != 0 || typed.Load() < 100 {
		t.Fatalf("%d answers, %d failed", typed.Load(), failed.Load())
	}
	if s, _ := status(t, ps[1]); s.Leader != leader || len(s.Members) != 3 {
		t.Fatalf("after the attacks and the rotation: %+v (leader was %s)", s, leader)
	}
	t.Logf("%d answers through the attacks and the rotation, 0 failed", typed.Load())
}

// With tls.https the admin APIs speak HTTPS: the CLI reaches a follower
// with -ca-file, writes forwarded between the agents (a login through a
// follower's front, a move through a follower's API) go over HTTPS with
// the cluster's certificates, and plain HTTP, or a CLI without the CA, is
// refused, so the admin token never crosses in clear.
func TestAdminHTTPS(t *testing.T) {
	waits(t)
	dir := t.TempDir()
	tlsCLI(t, dir, "ca", "create")
	tlsCLI(t, dir, "cert", "create", "-server")
	ca := filepath.Join(dir, "stickyd-agent-ca.pem")
	block := fmt.Sprintf("tls {\n  ca_file   = %q\n  cert_file = %q\n  key_file  = %q\n  https     = true\n}\n",
		ca, filepath.Join(dir, "global-server-stickyd-0.pem"), filepath.Join(dir, "global-server-stickyd-0-key.pem"))
	ps := startThreeServers(t, block)
	cli := func(p *proc, args ...string) (string, int) {
		t.Helper()
		return runCLIEnv(t, []string{"STICKYD_CACERT=" + ca}, p.admin, args...)
	}
	var leader string
	waitFor(t, 30*time.Second, "a leader of three, through HTTPS", func() bool {
		out, code := cli(ps[0], "operator", "raft", "list-peers")
		if code != 0 {
			return false
		}
		leader = ""
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "leader") {
				leader = strings.Fields(l)[0]
			}
		}
		return leader != "" && strings.Count(out, "true") == 3
	})
	var follower *proc
	for i, p := range ps {
		if "s"+strconv.Itoa(i+1) != leader {
			follower = p
		}
	}
	// A login through a follower's front: its write goes to the leader
	// over HTTPS.
	b := procBrowser(t, follower)
	if code, body := b.do("POST", "/login?user=ana"); code != 200 {
		t.Fatalf("login through a follower: %d %s", code, body)
	}
	if out, code := cli(follower, "user", "list"); code != 0 || !strings.Contains(out, "ana") {
		t.Fatalf("user list through a follower over HTTPS: %d %s", code, out)
	}
	// The CLI without the CA, and plain HTTP, are refused.
	if out, code := runCLIEnv(t, nil, "https://"+follower.admin, "user", "list"); code == 0 || !strings.Contains(out, "certificate") {
		t.Fatalf("the CLI without the CA: %d %s", code, out)
	}
	resp, err := http.Get("http://" + follower.admin + "/v1/agent/health")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatalf("plain HTTP answered: %s", body)
		}
	}
}
