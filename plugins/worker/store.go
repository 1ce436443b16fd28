package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// The global store is one tree shared by every worker of the pool; its
// master lives in the supervisor (the raft leader writes it, every server
// keeps a replica). A worker reads it with a call on its channel (Get);
// read-modify-write goes through a grant (Acquire): an ordered, all-or-
// nothing hold on a set of paths that carries the master's content for
// them, which the holder commits or releases. A grant is released without
// commit when its lease runs out, when its worker dies, or when its person
// moves away; a commit under such a grant is refused with ErrStaleGrant.

// ErrStaleGrant is returned by Commit when the store no longer holds the
// grant (its lease ran out, it was released, its worker or person left):
// nothing was written. Acquire again and redo the change.
var ErrStaleGrant = errors.New("grant is no longer held")

// Defaults of Acquire.
const (
	DefaultLease     = 10 * time.Second
	DefaultGrantWait = 30 * time.Second
)

// Get reads the global store: every value stored at or under each path,
// by path ("customers/42/name" → its JSON). It sees every commit this
// worker made before it, and every commit a table change it received was
// published after (read your writes; see Publish).
func Get(ctx context.Context, paths ...string) (Values, error) {
	rt, err := runtimeOf(ctx, "reading the store")
	if err != nil {
		return nil, err
	}
	env, err := rt.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_StoreGet{StoreGet: &protocol.StoreGet{Paths: paths, MinIndex: rt.storeIndex.Load()}}})
	if err != nil {
		return nil, storeErr("reading the store", err)
	}
	rt.sawStoreIndex(env.GetStoreValues().GetIndex())
	return raw(env.GetStoreValues().GetValues()), nil
}

// Grant is a hold on a set of paths of the global store.
type Grant struct {
	// ID names the grant; Token fences it (the store refuses a commit with
	// a token it no longer holds).
	ID, Token uint64
	// Values is the master's content at or under the grant's paths when it
	// was granted.
	Values Values
	// Lease is how long the grant lasts unless committed or released.
	Lease time.Duration

	rt   *runtime
	done bool
}

// Acquire waits for a grant on paths (FIFO: nobody overtakes an earlier
// request on overlapping paths; all the paths or none) and returns it with
// their content. lease bounds how long it is held (0: DefaultLease); the
// wait is bounded by ctx's deadline, or DefaultGrantWait.
func Acquire(ctx context.Context, paths []string, lease time.Duration) (*Grant, error) {
	rt, err := runtimeOf(ctx, "acquiring a grant")
	if err != nil {
		return nil, err
	}
	if lease <= 0 {
		lease = DefaultLease
	}
	wait := DefaultGrantWait
	if d, ok := ctx.Deadline(); ok {
		wait = time.Until(d)
	}
	req := &protocol.GrantAcquire{Paths: paths, LeaseMs: lease.Milliseconds(), WaitMs: max(wait.Milliseconds(), 1)}
	if s := SessionFrom(ctx); s != nil {
		req.User = s.userKey()
	}
	env, err := rt.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_GrantAcquire{GrantAcquire: req}})
	if err != nil {
		return nil, storeErr("acquiring a grant", err)
	}
	r := env.GetGrantReply()
	if r == nil {
		return nil, fmt.Errorf("acquiring a grant: the host answered %T", env.Body)
	}
	return &Grant{ID: r.Id, Token: r.Token, Values: raw(r.Values), Lease: time.Duration(r.LeaseMs) * time.Millisecond, rt: rt}, nil
}

// Commit writes set (path → JSON-like value) and deletes del, all within
// the grant's paths, atomically, and releases the grant.
func (g *Grant) Commit(ctx context.Context, set map[string]any, del ...string) error {
	if g.done {
		return fmt.Errorf("committing grant %d: %w (already committed or released here)", g.ID, ErrStaleGrant)
	}
	c := &protocol.GrantCommit{Id: g.ID, Token: g.Token, Delete: del, Set: map[string][]byte{}}
	for p, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("committing grant %d: encoding %q: %w", g.ID, p, err)
		}
		c.Set[p] = b
	}
	env, err := g.rt.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_GrantCommit{GrantCommit: c}})
	if err != nil {
		return storeErr(fmt.Sprintf("committing grant %d", g.ID), err)
	}
	// This worker's reads from now on see the commit.
	g.rt.sawStoreIndex(env.GetGrantCommit().GetIndex())
	g.done = true
	return nil
}

// Release gives the grant back without writing. Releasing twice is a
// no-op.
func (g *Grant) Release(ctx context.Context) error {
	if g.done {
		return nil
	}
	g.done = true
	_, err := g.rt.peer.Call(ctx, &protocol.Envelope{Body: &protocol.Envelope_GrantRelease{GrantRelease: &protocol.GrantRelease{Id: g.ID}}})
	if err != nil {
		return storeErr(fmt.Sprintf("releasing grant %d", g.ID), err)
	}
	return nil
}

// GetInto reads the value at path, with everything stored under it, into
// dst (a pointer, as for json.Unmarshal): a record into a struct, a
// collection into a map. Nothing stored there returns ErrNotFound.
func GetInto(ctx context.Context, path string, dst any) error {
	v, err := Get(ctx, path)
	if err != nil {
		return err
	}
	return v.Decode(path, dst)
}

// List names the members stored under path, sorted ("board/tasks" → the
// tasks' ids).
func List(ctx context.Context, path string) ([]string, error) {
	v, err := Get(ctx, path)
	if err != nil {
		return nil, err
	}
	return v.Children(path), nil
}

// Update is a read-modify-write of paths under a grant: fn gets their
// content and returns what to set (path → JSON-like value, or a struct)
// and delete, which is committed. A grant that went stale under fn (its
// lease ran out) is acquired again and fn runs again, up to 3 times. An
// error from fn releases the grant and is returned as it is.
func Update(ctx context.Context, paths []string, fn func(cur Values) (set map[string]any, del []string, err error)) error {
	var err error
	for range 3 {
		var g *Grant
		if g, err = Acquire(ctx, paths, 0); err != nil {
			return err
		}
		set, del, ferr := fn(g.Values)
		if ferr != nil {
			_ = g.Release(context.WithoutCancel(ctx))
			return ferr
		}
		if err = g.Commit(ctx, set, del...); !errors.Is(err, ErrStaleGrant) {
			return err
		}
	}
	return err
}

// sawStoreIndex raises the store index this worker's reads wait for.
func (rt *runtime) sawStoreIndex(i uint64) {
	for {
		cur := rt.storeIndex.Load()
		if i <= cur || rt.storeIndex.CompareAndSwap(cur, i) {
			return
		}
	}
}

func runtimeOf(ctx context.Context, what string) (*runtime, error) {
	s := SessionFrom(ctx)
	if s == nil || s.rt == nil || s.rt.peer == nil {
		return nil, fmt.Errorf("%s: not in a stickyd handler", what)
	}
	return s.rt, nil
}

func storeErr(what string, err error) error {
	var re *channel.RemoteError
	if errors.As(err, &re) && re.Code == protocol.Error_STALE_GRANT {
		return fmt.Errorf("%s: %w: %s", what, ErrStaleGrant, re.Message)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func raw(m map[string][]byte) Values {
	out := make(Values, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
