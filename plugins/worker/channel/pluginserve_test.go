package channel

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// pluginHost is a test's stand-in for go-plugin's client: it starts the
// worker's plugin server in this process with go-plugin's variables, reads
// the handshake line and dials the address it names, with AutoMTLS as
// go-plugin does it when mtls is set.
type pluginHost struct {
	s    *pluginServer
	cc   *grpc.ClientConn
	done chan error // Serve's return
}

func startPlugin(t *testing.T, mtls bool, serve func(context.Context, Conn) error) *pluginHost {
	t.Helper()
	env := map[string]string{
		"PLUGIN_PROTOCOL_VERSIONS": "1",
		"PLUGIN_UNIX_SOCKET_DIR":   t.TempDir(),
	}
	var creds credentials.TransportCredentials = insecure.NewCredentials()
	var clientCert tls.Certificate
	if mtls {
		// go-plugin's client makes its certificate as the worker does.
		var err error
		if clientCert, err = oneTimeCert(); err != nil {
			t.Fatal(err)
		}
		env["PLUGIN_CLIENT_CERT"] = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: clientCert.Certificate[0]}))
	}
	s, err := listenPlugin(func(k string) string { return env[k] }, serve)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Split(s.line, "|")
	if len(f) != 6 || f[0] != "1" || f[1] != "1" || f[4] != "grpc" {
		t.Fatalf("handshake line %q", s.line)
	}
	if f[2] != "unix" || filepath.Dir(f[3]) != env["PLUGIN_UNIX_SOCKET_DIR"] {
		t.Fatalf("listening on %s %s, want a Unix socket in %s", f[2], f[3], env["PLUGIN_UNIX_SOCKET_DIR"])
	}
	if mtls {
		der, err := base64.RawStdEncoding.DecodeString(f[5])
		if err != nil {
			t.Fatalf("the worker's certificate in %q: %v", s.line, err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		roots := x509.NewCertPool()
		roots.AddCert(cert)
		creds = credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{clientCert}, RootCAs: roots, ServerName: "localhost"})
	} else if f[5] != "" {
		t.Fatalf("a certificate without AutoMTLS: %q", s.line)
	}
	h := &pluginHost{s: s, done: make(chan error, 1)}
	go func() { h.done <- s.grpc.Serve(s.lis) }()
	dial := func(ctx context.Context, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, f[2], f[3])
	}
	h.cc, err = grpc.NewClient("passthrough:///worker", append(DialOptions(), grpc.WithContextDialer(dial), grpc.WithTransportCredentials(creds))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		h.cc.Close()
		s.grpc.Stop()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Error("Serve still running after Stop")
		}
	})
	// Serving once it answers (a Stop before Serve would make Serve fail).
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := grpc_health_v1.NewHealthClient(h.cc).Check(ctx, &grpc_health_v1.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatalf("the worker never answered: %v", err)
	}
	return h
}

// The services go-plugin's client calls, as it calls them: the health check
// of "plugin", the process's output streamed with its channel, and the
// controller's Shutdown, after which Serve returns nil.
func TestPluginServerSpeaksGoPlugin(t *testing.T) {
	for _, mtls := range []bool{true, false} {
		t.Run(map[bool]string{true: "automtls", false: "plain"}[mtls], func(t *testing.T) {
			h := startPlugin(t, mtls, func(ctx context.Context, c Conn) error { return nil })
			ctx := t.Context()

			hc := grpc_health_v1.NewHealthClient(h.cc)
			resp, err := hc.Check(ctx, &grpc_health_v1.HealthCheckRequest{Service: "plugin"})
			if err != nil || resp.Status != grpc_health_v1.HealthCheckResponse_SERVING {
				t.Fatalf("health of plugin: %v %v", resp, err)
			}

			raw := grpc.ForceCodecV2(pluginCodec{encoding.GetCodecV2(grpcproto.Name)})
			stdio, err := h.cc.NewStream(ctx, &stdioService.Streams[0], "/plugin.GRPCStdio/StreamStdio", raw)
			if err != nil {
				t.Fatal(err)
			}
			empty := rawMessage{}
			if err := stdio.SendMsg(&empty); err != nil {
				t.Fatal(err)
			}
			_ = stdio.CloseSend()
			go func() { h.s.stdout <- []byte("out\n") }()
			got := readStdio(t, stdio)
			go func() { h.s.stderr <- []byte("err\n") }()
			got += readStdio(t, stdio)
			if got != "1:out\n2:err\n" {
				t.Fatalf("stdio carried %q", got)
			}

			var out rawMessage
			err = h.cc.Invoke(ctx, "/plugin.GRPCController/Shutdown", &empty, &out, raw)
			if err != nil && status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
				t.Fatalf("shutdown: %v", err)
			}
			select {
			case err := <-h.done:
				if err != nil {
					t.Fatalf("Serve after Shutdown: %v", err)
				}
				close(h.done) // for the cleanup
			case <-time.After(5 * time.Second):
				t.Fatal("Serve still running after Shutdown")
			}
		})
	}
}

// readStdio reads one StdioData as "channel:data".
func readStdio(t *testing.T, s grpc.ClientStream) string {
	t.Helper()
	var m rawMessage
	if err := s.RecvMsg(&m); err != nil {
		t.Fatal(err)
	}
	var ch uint64
	var data []byte
	b := []byte(m)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.VarintType:
			ch, n = protowire.ConsumeVarint(b)
		case num == 2 && typ == protowire.BytesType:
			data, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			t.Fatalf("StdioData %x", []byte(m))
		}
		b = b[n:]
	}
	return string(rune('0'+ch)) + ":" + string(data)
}

// What the host's environment says decides whether the worker serves: no
// cookie is ErrNoHost; a host of another plugin protocol, or one that asks
// for a socket group, is refused with its reason.
func TestPluginServerChecksTheHost(t *testing.T) {
	t.Setenv(Handshake.MagicCookieKey, "")
	if err := ServePlugin(func(context.Context, Conn) error { return nil }, hclog.NewNullLogger()); err != ErrNoHost {
		t.Fatalf("without the cookie: %v", err)
	}
	for env, want := range map[string]string{
		"PLUGIN_PROTOCOL_VERSIONS=2,3":   "speaks plugin protocol 2,3",
		"PLUGIN_UNIX_SOCKET_GROUP=staff": `socket's group "staff"`,
		"PLUGIN_CLIENT_CERT=nonsense":    "not a PEM certificate",
	} {
		k, v, _ := strings.Cut(env, "=")
		getenv := func(name string) string {
			if name == k {
				return v
			}
			return ""
		}
		_, err := listenPlugin(getenv, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", env, err, want)
		}
	}
}

// The socket is gone once the worker stops.
func TestPluginServerRemovesItsSocket(t *testing.T) {
	h := startPlugin(t, false, func(context.Context, Conn) error { return nil })
	path := h.s.lis.Addr().String()
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	h.s.grpc.Stop()
	if err := <-h.done; err != nil {
		t.Fatal(err)
	}
	close(h.done)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there: %v", err)
	}
}
