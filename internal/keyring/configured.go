package keyring

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stickyd/stickyd/internal/fsm"
)

// Where the keys a server brings come from (Configured's source).
const (
	// fromFiles: cookie_key_files or cookie_key_file, the operator's.
	fromFiles = "files"
	// fromLegacy: <data_dir>/cookie.key of an older version, which seeds
	// the cluster's ring (nobody logged out by the upgrade) and is not
	// read once the maps hold one.
	fromLegacy = "legacy"
)

// Files is where a server's cookie keys are configured (the front block's
// cookie_key_files and cookie_key_file, and the data dir).
type Files struct {
	// Ring is cookie_key_files: the ring, in order, every file existing.
	Ring []string
	// File is cookie_key_file: one key, created on a first start.
	File string
	// DataDir may hold an older version's cookie.key; "" for none.
	DataDir string
	// RanBefore says DataDir held raft state when the agent started: a
	// File missing then is refused, not made anew.
	RanBefore bool
}

// Configured is the cookie keys a server brings, as Read found them. The
// zero value brings none: the cluster's ring, in the maps, is all there is.
type Configured struct {
	keys   [][]byte
	source string
}

// Read reads the cookie keys this server brings: every file of Ring (each
// must exist: a ring is the operator's), the one key of File (created on a
// first start, refused missing on a server that ran before), or the key an
// older version kept in <DataDir>/cookie.key. None: the zero Configured (a
// leader makes the ring at the first start). Every key holds at least
// fsm.MinCookieKeyBytes. The agent reads them before raft opens, so a
// missing key file stops the start before anything else does.
func Read(f Files) (Configured, error) {
	if len(f.Ring) > 0 {
		keys := make([][]byte, 0, len(f.Ring))
		for _, path := range f.Ring {
			key, err := os.ReadFile(path)
			if err != nil {
				return Configured{}, fmt.Errorf("reading the cookie key ring: %w", err)
			}
			if len(key) < fsm.MinCookieKeyBytes {
				return Configured{}, fmt.Errorf("cookie key %s holds %d bytes; it needs at least %d", path, len(key), fsm.MinCookieKeyBytes)
			}
			keys = append(keys, key)
		}
		return Configured{keys: keys, source: fromFiles}, nil
	}
	if path := f.File; path != "" {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) && f.RanBefore {
			// A new key would give every person a new identity.
			return Configured{}, fmt.Errorf("the cookie key %s is missing, but this server has run before (raft state in %s): "+
				"a new key would give every person a new identity. Restore the key file (the same key as the other servers'); "+
				"to start over on purpose, remove %s too", path, filepath.Join(f.DataDir, "raft"), filepath.Join(f.DataDir, "raft"))
		}
		key, err := readOrCreate(path)
		if err != nil {
			return Configured{}, err
		}
		if len(key) < fsm.MinCookieKeyBytes {
			return Configured{}, fmt.Errorf("cookie key %s holds %d bytes; it needs at least %d", path, len(key), fsm.MinCookieKeyBytes)
		}
		return Configured{keys: [][]byte{key}, source: fromFiles}, nil
	}
	if f.DataDir != "" {
		key, err := os.ReadFile(filepath.Join(f.DataDir, "cookie.key"))
		if err == nil && len(key) >= fsm.MinCookieKeyBytes {
			return Configured{keys: [][]byte{key}, source: fromLegacy}, nil
		}
	}
	return Configured{}, nil
}

// readOrCreate reads the key file at path, creating it (and its
// directory) with a new key, mode 0600, when it does not exist yet.
func readOrCreate(path string) ([]byte, error) {
	const what = "cookie key"
	b, err := os.ReadFile(path)
	if err == nil {
		return b, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	b = newKey()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("creating the directory of the %s: %w", what, err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", what, err)
	}
	return b, nil
}

// newKey is a new random cookie key.
func newKey() []byte {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return key
}
