package groups

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/stickyd/stickyd/internal/bundle"
	"github.com/stickyd/stickyd/internal/host"
)

// BundleSource is the configuration's bundles block: the archive the
// bundles of the groups come from.
type BundleSource struct {
	// Archive is a directory, a file:// URL or an http(s):// URL.
	Archive string
	// Token is sent to an HTTP archive ("": $STICKYD_BUNDLE_TOKEN).
	Token string
	// CacheDir holds the verified, unpacked bundles ("": <data dir>/bundles,
	// or without a data dir a directory of the system's temporary one).
	CacheDir string
}

// OpenBundles prepares the bundle cache of the configuration's archive,
// read-only; nil (and no error) without a bundles block.
func OpenBundles(src *BundleSource, dataDir string) (*bundle.Cache, error) {
	if src == nil {
		return nil, nil
	}
	tok := src.Token
	if tok == "" {
		tok = os.Getenv("STICKYD_BUNDLE_TOKEN")
	}
	ar, err := bundle.OpenArchive(src.Archive, bundle.ArchiveOptions{ReadOnly: true, Token: tok})
	if err != nil {
		return nil, fmt.Errorf("bundles: %w", err)
	}
	dir := src.CacheDir
	switch {
	case dir != "":
	case dataDir != "":
		dir = filepath.Join(dataDir, "bundles")
	default:
		dir = filepath.Join(os.TempDir(), "stickyd-bundles")
	}
	return &bundle.Cache{Dir: dir, Archive: ar}, nil
}

// bundleLauncher opens a group's bundle from the archive (through the local
// cache: verified, unpacked read-only) and runs its entry point with the
// manifest's arguments. Nothing is installed or built: a bundle that is not
// in the archive, or fails verification, is refused with the reason.
func (l *Launchers) bundleLauncher(r Recipe) (host.Launcher, error) {
	if l.cfg.Bundles == nil {
		return nil, fmt.Errorf("bundle %s: this agent has no bundles block naming an archive", r.Bundle)
	}
	// Its own bound, not the caller's: a first open downloads and unpacks
	// the bundle, which may take longer than a catalog sync's round.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o, err := l.cfg.Bundles.Open(ctx, r.Bundle)
	if err != nil {
		return nil, err
	}
	if rt := o.Manifest.Runtime; rt != "" && rt != "go-plugin" {
		return nil, fmt.Errorf("bundle %s needs runtime %q; this agent runs go-plugin bundles", r.Bundle, rt)
	}
	env := append(l.workerEnv(r), "STICKYD_BUNDLE="+o.Digest)
	l.cfg.Logger.Info("running a bundle", "bundle", o.Digest, "name", o.Manifest.Name, "version", o.Manifest.Version, "entry", o.EntryPath())
	return &host.PluginLauncher{Command: o.EntryPath(), Args: append(append([]string(nil), o.Manifest.Args...), r.Args...), Env: env,
		PlainChannel: r.PlainChannel, Logger: l.cfg.Logger.Named("plugin")}, nil
}

// CheckBundle makes sure a bundle a new group names is in the archive and
// verifies (it is unpacked into the cache on the way).
func (l *Launchers) CheckBundle(ctx context.Context, digest string) error {
	if l.cfg.Bundles == nil {
		return fmt.Errorf("this agent has no bundles block naming an archive")
	}
	o, err := l.cfg.Bundles.Open(ctx, digest)
	if err != nil {
		return err
	}
	if rt := o.Manifest.Runtime; rt != "" && rt != "go-plugin" {
		return fmt.Errorf("bundle %s needs runtime %q; agents run go-plugin bundles", digest, rt)
	}
	return nil
}
