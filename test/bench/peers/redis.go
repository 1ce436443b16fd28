package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stickyd/stickyd/internal/freeport"
)

// findBinary finds a peer's program on PATH or where its Debian package
// puts it (/usr/sbin is not on every PATH). The error says how to install
// it.
func findBinary(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found: install it (apt-get install %s; make bench-peers does) or leave its part out with -parts", name, pkg)
}

// startRedis starts redis-server on a free loopback port with its data in
// dir, without persistence (no RDB snapshots, no append-only file: the
// cheapest Redis can be), and waits until it answers PING.
func startRedis(ctx context.Context, dir string, stderr io.Writer) (*serverProc, error) {
	bin, err := findBinary("redis-server", "redis-server")
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
	p := &serverProc{name: "redis-server", addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), stopSig: syscall.SIGTERM}
	p.log = newTailLog(p.name, stderr, false, nil)
	cmd := exec.Command(bin,
		"--bind", "127.0.0.1", "--port", fmt.Sprint(ports[0]),
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--logfile", "", "--loglevel", "warning")
	if err := p.launch(cmd); err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: p.addr, DisableIdentity: true, MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(ctx, startLimit)
	defer cancel()
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		pcancel()
		if err == nil {
			return p, nil
		}
		if note := p.exited(); note != "" {
			return nil, errors.New(note)
		}
		select {
		case <-ctx.Done():
			p.kill()
			return nil, fmt.Errorf("waiting for redis-server to answer PING: %w (last: %v); its last lines:\n%s", ctx.Err(), err, p.log.tail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
