package raftnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// PeersFile is the name, inside <data_dir>/raft, of the file an operator
// writes to recover a cluster that lost its quorum (docs/operations.md): a
// JSON list of {"id", "address", "non_voter"}, as Consul's and Nomad's
// peers.json. At start the member replaces its configuration with it,
// keeping its log, and renames it to PeersFile + ".applied".
const PeersFile = "peers.json"

// recoverFromPeersFile applies <dir>/peers.json, if the operator wrote
// one, before raft starts.
func recoverFromPeersFile(rc *raft.Config, fsm raft.FSM, dir string, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, trans raft.Transport, log hclog.Logger) error {
	path := filepath.Join(dir, PeersFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	conf, err := raft.ReadConfigJSON(path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if len(conf.Servers) == 0 {
		return fmt.Errorf("%s lists no server", path)
	}
	log.Warn("recovering the raft configuration from the operator's file", "file", path, "servers", len(conf.Servers))
	if err := raft.RecoverCluster(rc, fsm, logs, stable, snaps, trans, conf); err != nil {
		return fmt.Errorf("recovering the raft configuration from %s: %w", path, err)
	}
	if err := os.Rename(path, path+".applied"); err != nil {
		return fmt.Errorf("renaming %s once applied: %w", path, err)
	}
	return nil
}
