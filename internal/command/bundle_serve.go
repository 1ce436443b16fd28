package command

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/stickyd/stickyd/internal/bundle"
)

// BundleServeCommand serves a directory archive over HTTP.
type BundleServeCommand struct{ Meta }

func (c *BundleServeCommand) Help() string {
	return strings.TrimSpace(`
Usage: stickyd bundle serve [options] -dir DIR

  Serves the directory archive DIR over HTTP, for agents (bundles { archive
  = "http://…" }) and for Nomad artifact stanzas: GET /<hex>.tar.gz, its
  checksum at /<hex>.tar.gz.sha256, the list at /index.json. Uploads (PUT,
  as stickyd bundle push does) need the token and are verified before
  they are stored. Stops on Ctrl-C.

Options:

  -dir=DIR           The archive directory (required; created if missing).
  -addr=ADDR         Where to listen. Default 127.0.0.1:4680.
  -token=T           The token uploads must carry. Default
                     $STICKYD_BUNDLE_TOKEN; without one, uploads are refused.
  -max-size=MB       The largest upload, in MiB. Default: the archive's.
`)
}

func (c *BundleServeCommand) Synopsis() string { return "Serve a bundle archive over HTTP" }

func (c *BundleServeCommand) Run(args []string) int {
	var dir, addr, token string
	var maxMB int64
	fs := c.plainFlagSet("bundle serve")
	fs.StringVar(&dir, "dir", "", "")
	fs.StringVar(&addr, "addr", "127.0.0.1:4680", "")
	fs.StringVar(&token, "token", os.Getenv("STICKYD_BUNDLE_TOKEN"), "")
	fs.Int64Var(&maxMB, "max-size", 0, "")
	if _, ok := c.parseArgs(fs, args, 0, c.Help); !ok {
		return 1
	}
	if dir == "" {
		c.UI.Error("missing -dir (see -help)")
		return 1
	}
	if maxMB < 0 {
		c.UI.Error("-max-size must not be negative")
		return 1
	}
	if _, err := bundle.NewDirArchive(dir, false); err != nil {
		return c.fail(err)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "bundles", Output: os.Stderr})
	h := bundle.Handler(dir, bundle.HandlerOptions{Token: token, MaxSize: maxMB << 20, Logger: log})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return c.fail(fmt.Errorf("listening on %s: %w", addr, err))
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := apiContext()
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	uploads := "uploads refused (no token)"
	if token != "" {
		uploads = "uploads with the token"
	}
	c.UI.Output(fmt.Sprintf("Serving the bundle archive %s on http://%s (%s)", dir, ln.Addr(), uploads))
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return c.fail(err)
	}
	return 0
}
