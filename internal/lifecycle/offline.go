package lifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/stickyd/stickyd/internal/host"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/park"
	"github.com/stickyd/stickyd/internal/placement"
)

// Parking with no quorum (docs/operations.md). When every server of a
// cluster stops at once, the last ones down have no quorum left: the maps
// cannot take their park entries, and waiting for a leader would spend the
// whole shutdown_timeout and lose everyone. So a stop that has had no
// leader for leaderGone parks the people it still holds by itself: each is
// frozen (at the epoch after the one the maps hold), their package written
// and named in the park folder's manifest as parked offline. The maps still
// place them, live, on the same worker at the same epoch; the restart keeps
// the manifest's offline people, and the first frame of each (or the next
// stop, or a move) wakes them from their package on that worker, as from a
// park, without a notice.

// leaderGone is how long a stop goes without a leader before it parks
// offline.
const leaderGone = 3 * time.Second

// offlinePark is one person parked with no quorum.
type offlinePark struct {
	User    string `json:"user"`
	Worker  string `json:"worker"`
	Epoch   uint64 `json:"epoch"`
	Package string `json:"package"`
}

// OfflineParks are the people the last stop parked offline, until each is
// woken. It implements host.OfflineParks; its zero value keeps nobody.
type OfflineParks struct {
	mu sync.Mutex
	m  map[string]offlinePark // by user
	// discard deletes a package nobody will wake from (nil keeps them).
	discard func(digest string)
}

var _ host.OfflineParks = (*OfflineParks)(nil)

func (o *OfflineParks) add(p offlinePark) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]offlinePark{}
	}
	o.m[p.User] = p
}

// drop forgets user's offline park (they woke from a newer package) and
// deletes its package.
func (o *OfflineParks) drop(user string) {
	o.mu.Lock()
	p, ok := o.m[user]
	delete(o.m, user)
	o.mu.Unlock()
	if ok && o.discard != nil {
		o.discard(p.Package)
	}
}

// List implements host.OfflineParks: the people parked offline on worker.
func (o *OfflineParks) List(worker string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for u, p := range o.m {
		if p.Worker == worker {
			out = append(out, u)
		}
	}
	return out
}

// Take implements host.OfflineParks: the package of user parked offline on
// worker at epoch, once.
func (o *OfflineParks) Take(worker, user string, epoch uint64) (string, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	p, ok := o.m[user]
	if !ok || p.Worker != worker {
		return "", false
	}
	delete(o.m, user)
	// The maps place them on the same worker, at the epoch of the park or
	// later (the restart rolled back a move the quorum left open): nothing
	// newer of them exists than this package. At an older epoch the package
	// is not theirs to wake from: it is deleted.
	if epoch < p.Epoch {
		if o.discard != nil {
			go o.discard(p.Package)
		}
		return "", false
	}
	return p.Package, true
}

// withLeader is ctx, ended once no leader has been known for leaderGone.
func (p *Parker) withLeader(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		var since time.Time
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if _, id := p.cfg.Leader.Leader(); id != "" {
				since = time.Time{}
				continue
			}
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= leaderGone {
				cancel(errNoQuorum)
				return
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

var errNoQuorum = fmt.Errorf("no raft leader, the other servers are gone: %w", move.ErrLogGone)

// hasLeader reports whether a leader is known now.
func (p *Parker) hasLeader() bool {
	_, id := p.cfg.Leader.Leader()
	return id != ""
}

// parkOffline parks users by this agent alone (no quorum): each frozen on
// their worker, their package appended to the park. It returns those it
// parked and the failures.
func (p *Parker) parkOffline(ctx context.Context, users []string, freeze time.Duration) ([]offlinePark, []parkFailure) {
	var parked []offlinePark
	var lost []parkFailure
	for _, user := range users {
		u, ok := p.cfg.Supervisor.User(user)
		switch {
		case !ok:
			continue // not in this replica's maps: nothing here to park
		case u.State == placement.StateParked && p.cfg.Park.Has(u.Package):
			continue // parked already (idle parking): the maps name their package
		case u.State == placement.StateParked:
			lost = append(lost, parkFailure{User: user, Error: "parked, and their package is not in the park"})
			continue
		}
		// Live, or moving (a barrier the log could not drop: the restart
		// rolls that move back, and they stay on this worker): what their
		// worker holds is the truth.
		fctx, cancel := context.WithTimeout(ctx, freeze)
		fz, err := p.cfg.Router.Freeze(fctx, u.Worker, user, u.Epoch+1)
		cancel()
		if err != nil {
			lost = append(lost, parkFailure{User: user, Error: "freezing with no quorum: " + err.Error()})
			continue
		}
		var digest string
		if ap, ok := p.cfg.Park.(park.Appender); ok {
			digest, err = ap.Append(fz.Package, park.DigestOfSum(fz.Sha256))
		} else {
			digest, err = p.cfg.Park.Put(fz.Package, true)
		}
		if err != nil {
			lost = append(lost, parkFailure{User: user, Error: "writing the package with no quorum: " + err.Error()})
			continue
		}
		parked = append(parked, offlinePark{User: user, Worker: u.Worker, Epoch: u.Epoch, Package: digest})
	}
	return parked, lost
}
