package consul

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/consul/api"
)

// Registry is what the mirror publishes from: the maps as the leader holds
// them.
type Registry interface {
	// Changes returns the raft index the maps are at and the people who
	// changed since the previous call (nil for one who is gone); all asks
	// for everyone instead (the first call, after a restore, a new host or
	// group), and then users is nil.
	Changes() (index uint64, users map[string]*User, all bool)
	// Placement is the whole registry, as of index or later.
	Placement(index uint64) Placement
	// Groups is the groups' JSON, by name.
	Groups() map[string]json.RawMessage
}

// Sync publishes what changed in r since the last Sync: the people who
// changed, the groups that differ and the index, in transactions of at
// most 64 operations. The first Sync, one after a failure and one the
// registry asks for, publishes everything (Publish): a published registry
// costs what changed, not the population.
func (m *Mirror) Sync(ctx context.Context, r Registry) error {
	index, users, all := r.Changes()
	m.mu.Lock()
	full := all || !m.incremental
	m.mu.Unlock()
	if full {
		if err := m.Publish(ctx, r.Placement(index)); err != nil {
			return err
		}
		m.mu.Lock()
		m.incremental = true
		m.mu.Unlock()
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.publishChangesLocked(ctx, index, users, r.Groups()); err != nil {
		// What changed is not written and no longer tracked: the next
		// Sync publishes everything.
		m.incremental, m.synced = false, false
		return fmt.Errorf("publishing placement changes at index %d: %w", index, err)
	}
	return nil
}

func (m *Mirror) publishChangesLocked(ctx context.Context, index uint64, users map[string]*User, groups map[string]json.RawMessage) error {
	names := make([]string, 0, len(users))
	for name := range users {
		if name != "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var ops api.TxnOps
	set := map[string][]byte{}
	for _, name := range names {
		key := m.usersPrefix() + url.PathEscape(name)
		u := users[name]
		if u == nil {
			if _, ok := m.kv[key]; ok {
				ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: key}})
				set[key] = nil
			}
			continue
		}
		b, err := json.Marshal(u)
		if err != nil {
			return fmt.Errorf("rendering user %q: %w", name, err)
		}
		if old, ok := m.kv[key]; ok && string(old) == string(b) {
			continue
		}
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: key, Value: b}})
		set[key] = b
	}
	// The groups, small, are compared whole with what was written.
	want := map[string][]byte{}
	for name, g := range groups {
		if name != "" && json.Valid(g) {
			want[m.groupsPrefix()+url.PathEscape(name)] = g
		}
	}
	have := map[string][]byte{}
	for k, v := range m.kv {
		if strings.HasPrefix(k, m.groupsPrefix()) {
			have[k] = v
		}
	}
	for _, op := range diff(have, want, "") {
		if op.KV.Key == "" {
			continue
		}
		ops = append(ops, op)
		set[op.KV.Key] = op.KV.Value
	}
	idx := []byte(strconv.FormatUint(index, 10))
	if len(ops) > 0 || string(m.kv[m.indexKey()]) != string(idx) {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: m.indexKey(), Value: idx}})
		set[m.indexKey()] = idx
	}
	if len(ops) == 0 {
		return nil
	}
	if err := m.applyLocked(ctx, ops); err != nil {
		return err
	}
	m.lastOps = len(ops)
	if m.kv == nil {
		m.kv = map[string][]byte{}
	}
	for k, v := range set {
		if v == nil {
			delete(m.kv, k)
		} else {
			m.kv[k] = v
		}
	}
	return nil
}
