package server

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// TokenSource says where the admin token is: configured (admin.token),
// in a file (admin.token_file), or in the data directory.
type TokenSource struct {
	Token, File, DataDir string
}

// AdminToken finds the admin token: configured, $STICKYD_TOKEN, the data
// dir's admin.token (created once), or a random one (dev).
func AdminToken(src TokenSource, log hclog.Logger) (string, error) {
	if src.Token != "" {
		return src.Token, nil
	}
	if path := src.File; path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("reading the admin token: %w", err)
		}
		t := strings.TrimSpace(string(b))
		if t == "" {
			return "", fmt.Errorf("admin token_file %s is empty", path)
		}
		return t, nil
	}
	if t := os.Getenv("STICKYD_TOKEN"); t != "" {
		return t, nil
	}
	if src.DataDir == "" {
		return randomToken(), nil
	}
	path := filepath.Join(src.DataDir, "admin.token")
	b, err := readOrCreate(path, "admin token", func() []byte {
		return []byte(randomToken() + "\n")
	})
	if err != nil {
		return "", err
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		// An empty file names no token: make one, as on a first start.
		t = randomToken()
		if err := os.WriteFile(path, []byte(t+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("writing admin token: %w", err)
		}
	}
	// Where the token is, never the token: the CLI wants it in
	// STICKYD_TOKEN (or -token).
	log.Info("admin token in a file: export STICKYD_TOKEN=$(cat FILE) for the CLI", "file", path)
	return t, nil
}

// readOrCreate reads a secret file, creating it (and its directory) with
// make's content, mode 0600, when it does not exist yet.
func readOrCreate(path, what string, make func() []byte) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	b = make()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the directory of the %s: %w", what, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", what, err)
	}
	return b, nil
}

func randomToken() string {
	b := make([]byte, 18)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
