package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hashicorp/consul/api"
)

// Limits of one Consul transaction: Consul rejects more than 64 operations
// (agent/txn_endpoint.go maxTxnOps) and request bodies over
// limits.txn_max_req_len (512 KiB by default). Values travel base64-encoded,
// so the byte budget counts 4/3 of each value plus the key and some framing.
const (
	maxTxnOps   = 64
	maxTxnBytes = 384 << 10
)

// Placement is the state the mirror publishes: who runs where, and the
// groups, as of a Raft index.
type Placement struct {
	// Index is the Raft index the state is as of.
	Index uint64
	// Users maps user name to where the user is placed.
	Users map[string]User
	// Groups maps group name to the group's JSON, written as given.
	Groups map[string]json.RawMessage
}

// User is where one user is placed; it is the JSON value of the user's key.
type User struct {
	Group  string `json:"group"`
	Worker string `json:"worker"`
	Host   string `json:"host"`
	Epoch  uint64 `json:"epoch"`
	State  string `json:"state"`
}

// Mirror publishes Placement to Consul's KV store under the client's prefix:
//
//	<prefix>placement/users/<user>  JSON of User, <user> path-escaped
//	<prefix>groups/<group>          the group's JSON, <group> path-escaped
//	<prefix>placement/index         the Raft index, in decimal
//
// Path escaping (url.PathEscape) keeps a "/" in a name from making a
// sub-key. The index key is written last, in the last transaction, so a
// reader who sees index N sees at least the state as of N.
//
// A Mirror must be used by one writer at a time, the Raft leader; the caller
// ensures that. Publish calls are serialised. The Mirror never touches keys
// outside <prefix>placement/ and <prefix>groups/.
type Mirror struct {
	c *Client

	mu sync.Mutex // guards the fields below and serialises Publish
	// synced is true when kv matches Consul: after a successful Publish.
	// When false, the next Publish lists the keys in Consul first.
	synced bool
	// kv is what the mirror last wrote, key to value, for the diff.
	kv map[string][]byte
	// incremental is true once a whole registry was published: Sync then
	// writes what changed (sync.go).
	incremental bool
	// lastOps counts the operations of the last change Sync wrote.
	lastOps int
}

// NewMirror returns a Mirror writing through c. It does not contact Consul;
// the first Publish reads what is there.
func NewMirror(c *Client) *Mirror {
	return &Mirror{c: c}
}

func (m *Mirror) usersPrefix() string  { return m.c.prefix + "placement/users/" }
func (m *Mirror) groupsPrefix() string { return m.c.prefix + "groups/" }
func (m *Mirror) indexKey() string     { return m.c.prefix + "placement/index" }

// Publish makes Consul's KV store hold p. It writes only what changed since
// the last successful Publish and deletes the users and groups that are
// gone. On the first call, and after a failed one, it first lists the keys
// under <prefix>placement/users/ and <prefix>groups/ and diffs against them,
// so stale keys from an earlier leader are deleted. Writes go through
// Consul transactions of at most 64 operations; each transaction is atomic
// but a Publish as a whole is not. On error the returned error says how many
// transactions were applied, and the next Publish starts from a fresh
// listing.
func (m *Mirror) Publish(ctx context.Context, p Placement) error {
	m.mu.Lock()
	defer m.mu.Unlock()

	want, err := m.render(p)
	if err != nil {
		return fmt.Errorf("publishing placement at index %d: %w", p.Index, err)
	}
	if !m.synced {
		have, err := m.list(ctx)
		if err != nil {
			return fmt.Errorf("publishing placement at index %d: %w", p.Index, err)
		}
		m.kv = have
	}
	ops := diff(m.kv, want, m.indexKey())
	if err := m.applyLocked(ctx, ops); err != nil {
		m.synced = false
		return fmt.Errorf("publishing placement at index %d: %w", p.Index, err)
	}
	m.kv = want
	m.synced = true
	return nil
}

// render returns the keys and values p is published as, the index key
// included.
func (m *Mirror) render(p Placement) (map[string][]byte, error) {
	want := make(map[string][]byte, len(p.Users)+len(p.Groups)+1)
	for name, u := range p.Users {
		if name == "" {
			return nil, errors.New("rendering users: empty user name")
		}
		b, err := json.Marshal(u)
		if err != nil {
			return nil, fmt.Errorf("rendering user %q: %w", name, err)
		}
		want[m.usersPrefix()+url.PathEscape(name)] = b
	}
	for name, g := range p.Groups {
		if name == "" {
			return nil, errors.New("rendering groups: empty group name")
		}
		if !json.Valid(g) {
			return nil, fmt.Errorf("rendering group %q: value is not valid JSON", name)
		}
		want[m.groupsPrefix()+url.PathEscape(name)] = []byte(g)
	}
	want[m.indexKey()] = []byte(strconv.FormatUint(p.Index, 10))
	return want, nil
}

// list reads the mirror's keys as Consul has them now: every key under the
// users and groups prefixes, and the index key.
func (m *Mirror) list(ctx context.Context) (map[string][]byte, error) {
	kv := make(map[string][]byte)
	q := (&api.QueryOptions{}).WithContext(ctx)
	for _, prefix := range []string{m.usersPrefix(), m.groupsPrefix()} {
		pairs, _, err := m.c.api.KV().List(prefix, q)
		if err != nil {
			return nil, fmt.Errorf("listing %s in consul at %s: %w", prefix, m.c.addr, err)
		}
		for _, p := range pairs {
			kv[p.Key] = p.Value
		}
	}
	pair, _, err := m.c.api.KV().Get(m.indexKey(), q)
	if err != nil {
		return nil, fmt.Errorf("reading %s in consul at %s: %w", m.indexKey(), m.c.addr, err)
	}
	if pair != nil {
		kv[pair.Key] = pair.Value
	}
	return kv, nil
}

// diff returns the operations that turn have into want: deletes and sets in
// key order, with the set of indexKey (if any) last.
func diff(have, want map[string][]byte, indexKey string) api.TxnOps {
	var keys []string
	for k := range have {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	for k, v := range want {
		if old, ok := have[k]; (!ok || !bytes.Equal(old, v)) && k != indexKey {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	ops := make(api.TxnOps, 0, len(keys)+1)
	for _, k := range keys {
		if v, ok := want[k]; ok {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: k, Value: v}})
		} else {
			ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVDelete, Key: k}})
		}
	}
	// The index goes last whenever anything changed, so a reader who sees
	// it sees everything before it.
	if old, ok := have[indexKey]; len(ops) > 0 || !ok || !bytes.Equal(old, want[indexKey]) {
		ops = append(ops, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVSet, Key: indexKey, Value: want[indexKey]}})
	}
	return ops
}

// batches splits ops into transactions within Consul's limits, in order.
func batches(ops api.TxnOps) []api.TxnOps {
	var out []api.TxnOps
	var cur api.TxnOps
	size := 0
	for _, op := range ops {
		n := len(op.KV.Key) + len(op.KV.Value)*4/3 + 64
		if len(cur) == maxTxnOps || (len(cur) > 0 && size+n > maxTxnBytes) {
			out = append(out, cur)
			cur, size = nil, 0
		}
		cur = append(cur, op)
		size += n
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// applyLocked runs ops as consecutive transactions. The error names the
// failed transaction and how many operations were applied before it.
func (m *Mirror) applyLocked(ctx context.Context, ops api.TxnOps) error {
	bs := batches(ops)
	q := (&api.QueryOptions{}).WithContext(ctx)
	done := 0
	for i, b := range bs {
		ok, resp, _, err := m.c.api.Txn().Txn(b, q)
		if err == nil && !ok {
			err = txnError(b, resp)
		}
		if err != nil {
			return fmt.Errorf("writing transaction %d of %d to consul at %s (%d of %d operations applied): %w",
				i+1, len(bs), m.c.addr, done, len(ops), err)
		}
		done += len(b)
	}
	return nil
}

// txnError describes why Consul rolled a transaction back.
func txnError(ops api.TxnOps, resp *api.TxnResponse) error {
	if resp == nil || len(resp.Errors) == 0 {
		return errors.New("transaction rolled back")
	}
	var msgs []string
	for _, e := range resp.Errors {
		what := e.What
		if e.OpIndex >= 0 && e.OpIndex < len(ops) {
			what = fmt.Sprintf("%s %s: %s", ops[e.OpIndex].KV.Verb, ops[e.OpIndex].KV.Key, e.What)
		}
		msgs = append(msgs, what)
	}
	return fmt.Errorf("transaction rolled back: %s", strings.Join(msgs, "; "))
}
