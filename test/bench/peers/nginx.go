package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stickyd/stickyd/internal/freeport"
)

// nginxConfig is nginx as a sticky WebSocket proxy: the upstream is chosen
// by a consistent hash of the session cookie, so a person always reaches
// the same backend, and an upgrade is passed through. Everything it writes
// stays in its own directory.
//
// Each worker has its own open-file limit and a proxied WebSocket holds two
// descriptors (the client's, the backend's), so the listener uses
// reuseport: the kernel spreads connections evenly over the workers instead
// of letting the first awake take most of them. nginx connects to a backend
// from the loopback address the client came from (proxy_bind): past
// perSource connections the clients come from several addresses, and so
// the connections to one backend do not run out of ports either.
const nginxConfig = `daemon off;
master_process on;
worker_processes auto;
worker_rlimit_nofile {{files}};
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log warn;

events {
    worker_connections {{conns}};
}

http {
    access_log off;
    client_body_temp_path {{dir}}/body;
    proxy_temp_path {{dir}}/proxy;
    fastcgi_temp_path {{dir}}/fastcgi;
    uwsgi_temp_path {{dir}}/uwsgi;
    scgi_temp_path {{dir}}/scgi;

    map $http_upgrade $connection_upgrade {
        default upgrade;
        ''      close;
    }

    upstream backends {
        hash $cookie_sid consistent;
{{servers}}
    }

    server {
        listen {{addr}} reuseport;
        location / {
            proxy_pass http://backends;
            proxy_bind $remote_addr;
            proxy_http_version 1.1;
            proxy_set_header Host $host;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
        }
    }
}
`

// startNginx starts nginx on a free loopback port in front of backends
// (host:port each), with its configuration, pid file, logs and temporary
// files in dir, and waits until it accepts connections.
func startNginx(ctx context.Context, dir string, backends []string, stderr io.Writer) (*serverProc, error) {
	bin, err := findBinary("nginx", "nginx")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := freeport.Take(1)
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	var servers strings.Builder
	for _, b := range backends {
		fmt.Fprintf(&servers, "        server %s;\n", b)
	}
	files := fileLimit()
	conf := strings.NewReplacer(
		"{{files}}", fmt.Sprint(files),
		"{{conns}}", fmt.Sprint(max(files-64, 512)),
		"{{dir}}", dir,
		"{{servers}}", strings.TrimRight(servers.String(), "\n"),
		"{{addr}}", addr,
	).Replace(nginxConfig)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("writing nginx's configuration: %w", err)
	}
	// SIGTERM is nginx's fast shutdown; SIGQUIT would wait for every
	// WebSocket to close.
	p := &serverProc{name: "nginx", addr: addr, stopSig: syscall.SIGTERM}
	p.log = newTailLog(p.name, stderr, false, nil)
	// -e: the error log before the configuration is read (the package's
	// default is a system path).
	cmd := exec.Command(bin, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	if err := p.launch(cmd); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return p, nil
		}
		if note := p.exited(); note != "" {
			return nil, errors.New(note + nginxErrors(dir))
		}
		select {
		case <-ctx.Done():
			p.kill()
			return nil, fmt.Errorf("waiting for nginx to listen on %s: %w%s", addr, ctx.Err(), nginxErrors(dir))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// nginxErrors is nginx's error log, for an error message.
func nginxErrors(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "error.log"))
	if err != nil || len(b) == 0 {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "\nnginx's error log:\n" + string(b)
}
