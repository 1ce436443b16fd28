package channel

// The worker's end of go-plugin's gRPC protocol, written here so that a
// worker does not link go-plugin: its package brings net/rpc, encoding/gob,
// html/template and gRPC reflection into every binary that imports it,
// about 3.4 MB of a 13.4 MB worker (docs/sdk.md). The host keeps
// go-plugin's client; what that client needs from the process
// (go-plugin's server.go and grpc_server.go) is:
//
//   - the magic cookie in the environment (Handshake), else ErrNoHost;
//   - a listener: a Unix socket in PLUGIN_UNIX_SOCKET_DIR, or on Windows
//     TCP on 127.0.0.1 between PLUGIN_MIN_PORT and PLUGIN_MAX_PORT;
//   - with AutoMTLS (PLUGIN_CLIENT_CERT set), a one-time certificate of its
//     own, mutual TLS that takes only the host's certificate, and its own
//     (DER, base64 without padding) in the handshake line;
//   - the line CORE|APP|NETWORK|ADDRESS|grpc|CERT on stdout;
//   - grpc.health.v1.Health ("plugin" serving), plugin.GRPCController
//     Shutdown (the worker stops), plugin.GRPCStdio StreamStdio (what the
//     process writes to stdout and stderr from then on, which the host
//     logs), and the channel's own Worker service. go-plugin's broker,
//     which a worker never uses, is absent: the client tolerates that, as
//     it does for the Python SDK's worker (plugins/python/stickyd/plugin.py).

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// ErrNoHost is ServePlugin's answer when no stickyd host started the
// process (the magic cookie is missing): someone ran the worker by hand.
var ErrNoHost = errors.New("this worker was not started by a stickyd host")

// coreProtocol is go-plugin's own protocol version, the handshake line's
// first field.
const coreProtocol = 1

// ServePlugin serves the worker's end of go-plugin's gRPC protocol, as a
// go-plugin host (stickyd's) expects of the process it started: serve runs
// the channel the host opens. From the handshake on, what the process
// writes to os.Stdout and os.Stderr goes to the host, which logs it; log
// keeps the stderr it had. ServePlugin returns nil when the host stops the
// worker, ErrNoHost at once when no host started the process, or what kept
// it from serving.
func ServePlugin(serve func(context.Context, Conn) error, log hclog.Logger) error {
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		return ErrNoHost
	}
	s, err := listenPlugin(os.Getenv, serve)
	if err != nil {
		return err
	}
	defer s.lis.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("making the stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("making the stderr pipe: %w", err)
	}
	go relay(outR, s.stdout)
	go relay(errR, s.stderr)
	if _, err := fmt.Fprintln(os.Stdout, s.line); err != nil {
		return fmt.Errorf("writing the handshake line: %w", err)
	}
	_ = os.Stdout.Sync()
	os.Stdout, os.Stderr = outW, errW
	// A Ctrl-C in a terminal reaches the whole process group: the host
	// decides when its workers stop. Notify, not Ignore: the processes the
	// app starts keep the default.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	go func() {
		for range interrupts {
			log.Debug("interrupt ignored: the host stops this worker")
		}
	}()
	return s.grpc.Serve(s.lis)
}

// pluginServer is the listener, the gRPC server with its services, and the
// line that tells the host where they are.
type pluginServer struct {
	grpc *grpc.Server
	lis  net.Listener
	line string // the handshake line, without its newline
	// stdout and stderr carry what the process writes, a piece at a time,
	// to StreamStdio. Unbuffered: a writer waits for the host, which reads
	// from the start (go-plugin's behaviour).
	stdout, stderr chan []byte
}

// listenPlugin makes the listener and the server, reading go-plugin's
// variables with getenv; nothing is served before Serve.
func listenPlugin(getenv func(string) string, serve func(context.Context, Conn) error) (*pluginServer, error) {
	if v := getenv("PLUGIN_PROTOCOL_VERSIONS"); v != "" {
		want := strconv.FormatUint(uint64(Handshake.ProtocolVersion), 10)
		if !slices.Contains(strings.Split(v, ","), want) {
			return nil, fmt.Errorf("the host speaks plugin protocol %s; this worker speaks %s", v, want)
		}
	}
	if g := getenv("PLUGIN_UNIX_SOCKET_GROUP"); g != "" {
		// stickyd's host sets none (go-plugin's UnixSocketConfig).
		return nil, fmt.Errorf("the host asks for the socket's group %q, which a stickyd worker does not set", g)
	}
	lis, err := pluginListener(getenv)
	if err != nil {
		return nil, fmt.Errorf("listening for the host: %w", err)
	}
	opts := append(ServerOptions(), grpc.ForceServerCodecV2(pluginCodec{encoding.GetCodecV2(grpcproto.Name)}))
	certField := ""
	if pem := getenv("PLUGIN_CLIENT_CERT"); pem != "" {
		cfg, der, err := autoMTLS(pem)
		if err != nil {
			lis.Close()
			return nil, err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
		certField = base64.RawStdEncoding.EncodeToString(der)
	}
	s := &pluginServer{
		grpc:   grpc.NewServer(opts...),
		lis:    lis,
		line:   fmt.Sprintf("%d|%d|%s|%s|grpc|%s", coreProtocol, Handshake.ProtocolVersion, lis.Addr().Network(), lis.Addr(), certField),
		stdout: make(chan []byte),
		stderr: make(chan []byte),
	}
	hs := health.NewServer()
	hs.SetServingStatus("plugin", grpc_health_v1.HealthCheckResponse_SERVING)
	grpc_health_v1.RegisterHealthServer(s.grpc, hs)
	s.grpc.RegisterService(&controllerService, s)
	s.grpc.RegisterService(&stdioService, s)
	RegisterServer(s.grpc, serve)
	return s, nil
}

// pluginListener is where the worker listens, as go-plugin's server
// chooses it.
func pluginListener(getenv func(string) string) (net.Listener, error) {
	if runtime.GOOS == "windows" {
		lo, _ := strconv.Atoi(getenv("PLUGIN_MIN_PORT"))
		hi, _ := strconv.Atoi(getenv("PLUGIN_MAX_PORT"))
		for port := lo; port <= hi; port++ {
			if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				return l, nil
			}
		}
		return nil, fmt.Errorf("no free port between %d and %d", lo, hi)
	}
	// A name of CreateTemp's, free again: the socket must not exist.
	f, err := os.CreateTemp(getenv("PLUGIN_UNIX_SOCKET_DIR"), "plugin")
	if err != nil {
		return nil, err
	}
	path := f.Name()
	f.Close()
	if err := os.Remove(path); err != nil {
		return nil, err
	}
	// Closing it removes the socket.
	return net.Listen("unix", path)
}

// autoMTLS is go-plugin's AutoMTLS on the worker's side: clientPEM is the
// host's one-time certificate, the only one the worker takes; the worker
// makes its own (returned in DER for the handshake line) for this process
// alone.
func autoMTLS(clientPEM string) (*tls.Config, []byte, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(clientPEM)) {
		return nil, nil, errors.New("reading the host's certificate (PLUGIN_CLIENT_CERT): not a PEM certificate")
	}
	cert, err := oneTimeCert()
	if err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	}
	return cfg, cert.Certificate[0], nil
}

// oneTimeCert is a key and a certificate for this process's life, made as
// go-plugin makes them: named localhost (the host's ServerName), its own
// CA (the other end takes it as its only root), for both ends of TLS.
func oneTimeCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the worker's key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the worker's certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "localhost", Organization: []string{"HashiCorp"}},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-30 * time.Second),
		NotAfter:              time.Now().Add(30 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyAgreement | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("making the worker's certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// relay sends what r yields to ch, a piece of at most 1 KiB at a time
// (go-plugin's copyChan), until r ends.
func relay(r io.Reader, ch chan<- []byte) {
	for {
		buf := make([]byte, 1024)
		n, err := r.Read(buf)
		if n > 0 {
			ch <- buf[:n]
		}
		if err != nil {
			return
		}
	}
}

// rawMessage is a message the worker encodes by hand: go-plugin's own
// (Empty, StdioData), whose Go types are internal to go-plugin. Names do
// not travel on the wire, only fields.
type rawMessage []byte

// pluginCodec is gRPC's protobuf codec, which also carries rawMessages as
// they are.
type pluginCodec struct{ encoding.CodecV2 }

func (c pluginCodec) Marshal(v any) (mem.BufferSlice, error) {
	if r, ok := v.(*rawMessage); ok {
		return mem.BufferSlice{mem.SliceBuffer(*r)}, nil
	}
	return c.CodecV2.Marshal(v)
}

func (c pluginCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if r, ok := v.(*rawMessage); ok {
		*r = data.Materialize()
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// controllerService is go-plugin's plugin.GRPCController: Shutdown (Empty
// in, Empty out) stops the server, and ServePlugin returns.
var controllerService = grpc.ServiceDesc{
	ServiceName: "plugin.GRPCController",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Shutdown",
		Handler: func(srv any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			var in rawMessage
			if err := dec(&in); err != nil {
				return nil, err
			}
			// Stop ends this call too; go-plugin's own server does the
			// same, and its client does not wait for the answer.
			go srv.(*pluginServer).grpc.Stop()
			return &rawMessage{}, nil
		},
	}},
}

// stdioService is go-plugin's plugin.GRPCStdio: StreamStdio (Empty in)
// streams StdioData{channel = 1 (1 stdout, 2 stderr), data = 2} for as
// long as the host listens.
var stdioService = grpc.ServiceDesc{
	ServiceName: "plugin.GRPCStdio",
	HandlerType: (*any)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "StreamStdio",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			var in rawMessage
			if err := stream.RecvMsg(&in); err != nil {
				return err
			}
			return srv.(*pluginServer).streamStdio(stream)
		},
	}},
}

// Channels of go-plugin's StdioData.
const (
	stdioOut = 1
	stdioErr = 2
)

func (s *pluginServer) streamStdio(stream grpc.ServerStream) error {
	for {
		var data []byte
		var ch uint64
		select {
		case data = <-s.stdout:
			ch = stdioOut
		case data = <-s.stderr:
			ch = stdioErr
		case <-stream.Context().Done():
			return nil
		}
		msg := protowire.AppendTag(nil, 1, protowire.VarintType)
		msg = protowire.AppendVarint(msg, ch)
		msg = protowire.AppendTag(msg, 2, protowire.BytesType)
		msg = protowire.AppendBytes(msg, data)
		raw := rawMessage(msg)
		if err := stream.SendMsg(&raw); err != nil {
			return err
		}
	}
}
