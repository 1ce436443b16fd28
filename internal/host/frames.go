package host

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stickyd/stickyd/plugins/worker/channel"
	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// What the host sends a worker: frames and envelopes, each waiting for the
// worker to be ready, and before a person's first frame on it, their wake
// (from their parked package, their crash checkpoints or the package a
// stop parked offline).

// Send starts a frame to a worker, waiting (bounded by ctx) while the worker
// is being replaced. Frames sent from one goroutine arrive in order.
func (p *Pool) Send(ctx context.Context, workerID string, f *protocol.Frame) (*channel.Call, error) {
	s, err := p.slot(workerID)
	if err != nil {
		return nil, err
	}
	for {
		peer, err := s.readyPeer(ctx, p.stopCh())
		if err != nil {
			return nil, err
		}
		if err := p.beforeUser(ctx, s, peer, f.User, f.Epoch, f.WakePackage); err != nil {
			return nil, err
		}
		c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Frame{Frame: f}})
		if err == nil {
			return c, nil
		}
		select {
		case <-peer.Done():
			// The worker died under the frame: wait for its replacement.
			if ctx.Err() != nil {
				return nil, err
			}
		default:
			// The frame itself could not be sent (it cannot be encoded):
			// retrying would fail the same way.
			return nil, err
		}
	}
}

// beforeUser sends, ahead of an envelope of user at epoch, the wake it
// needs: from the parked package digest (once per incarnation), or, for a
// person this incarnation must restore, from their crash checkpoint. The
// worker runs the wake in the person's mailbox before the envelope. A wake
// another goroutine is sending the person is waited for (bounded by ctx),
// so nothing of theirs overtakes it.
func (p *Pool) beforeUser(ctx context.Context, s *slot, peer *channel.Peer, user string, epoch uint64, digest string) error {
	if digest != "" && p.stopping.Load() {
		return ErrNoWakeStopping
	}
	if digest == "" && s.listing.Load() {
		// The people to restore are being listed: this one may be of them.
		s.mu.Lock()
		listed := s.listed
		s.mu.Unlock()
		select {
		case <-listed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the crash checkpoint list: %w", ctx.Err())
		}
	}
	if digest == "" && s.special.Load() == 0 {
		return nil
	}
	for {
		s.mu.Lock()
		if s.peer != peer {
			s.mu.Unlock()
			return nil // replaced: the envelope's Start fails, and Send retries
		}
		ch := s.waking[user]
		if ch == nil {
			break // s.mu held
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the wake of %q: %w", user, ctx.Err())
		}
	}
	restore := s.restore[user]
	if restore {
		delete(s.restore, user)
		s.special.Add(-1)
	}
	if digest != "" && s.woken[user] >= epoch || digest == "" && !restore {
		s.mu.Unlock()
		return nil
	}
	if digest != "" {
		s.woken[user] = epoch
	}
	ch := make(chan struct{})
	s.waking[user] = ch
	s.special.Add(1)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.waking[user] == ch { // not a new incarnation's map
			delete(s.waking, user)
			s.special.Add(-1)
		}
		s.mu.Unlock()
		close(ch)
	}()
	if digest != "" {
		// A package is the truth: whatever checkpoint the person had here
		// is older (dropped once they are woken).
		p.wake(s, peer, user, epoch, digest)
	} else {
		p.restore(s, peer, user, epoch)
	}
	return nil
}

// ErrNoWakeStopping refuses a parked person's wake on a host that is
// stopping: its workers go down with it, and what the person did there
// would go with them. Their package waits for wherever they go next; the
// front retries.
var ErrNoWakeStopping = errors.New("this host is stopping; the session wakes where it goes next: retry")

// Stopping refuses, from now on, to wake parked people on this host's
// workers (ErrNoWakeStopping): the stop is parking everyone, and a person woken
// here meanwhile (an idle park, or one the stop already parked, whose next
// frame came through another server) would lose what they did before the
// workers stop. People already awake are served until their park.
func (p *Pool) Stopping() { p.stopping.Store(true) }

// wake sends the user's package. A package that cannot be read is reported
// and the user wakes with no state (their pages restart clean with a
// notice): a clear outcome, never a hang.
func (p *Pool) wake(s *slot, peer *channel.Peer, user string, epoch uint64, digest string) {
	var pkg []byte
	if p.Parcels != nil {
		b, err := p.Parcels.Get(digest)
		if err != nil {
			s.log.Error("reading a parked package; the user wakes without state", "user", user, "package", digest, "error", err)
		}
		pkg = b
	}
	woken := func() {
		if p.Checkpoints != nil {
			p.Checkpoints.Forget(s.id, user, epoch)
		}
		if p.Woken != nil {
			p.Woken(user, digest, protocol.PackageBase(pkg))
		}
	}
	wake := &protocol.Wake{User: user, Epoch: epoch, Package: pkg}
	if base := protocol.PackageBase(pkg); base != "" {
		// The package continues a precopy the worker should have staged:
		// the wake is waited for (the envelope behind it waits anyway), and
		// sent again with the precopy if the worker no longer has it.
		p.wakeFromBase(s, peer, wake, base, woken)
		return
	}
	c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: wake}})
	if err != nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		defer cancel()
		if _, err := c.Wait(ctx); err != nil {
			s.log.Error("waking a user", "user", user, "error", err)
			return
		}
		woken()
	}()
}

// wakeFromBase sends a wake whose package continues the precopy base and
// waits for it; a worker that no longer has base staged is sent it.
func (p *Pool) wakeFromBase(s *slot, peer *channel.Peer, wake *protocol.Wake, base string, woken func()) {
	ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
	defer cancel()
	for try := 0; ; try++ {
		c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: wake}})
		if err != nil {
			return
		}
		_, err = c.Wait(ctx)
		var re *channel.RemoteError
		if try == 0 && errors.As(err, &re) && re.Code == protocol.Error_NOT_FOUND && p.Parcels != nil {
			s.log.Info("the worker has no staged copy of a moved person's precopy; sending it with the wake", "user", wake.User, "package", base)
			b, gerr := p.Parcels.Get(base)
			if gerr != nil {
				s.log.Error("reading the precopy a parked package continues; the user wakes without state", "user", wake.User, "package", base, "error", gerr)
				wake.Package = nil
			}
			wake.BasePackage = b
			continue
		}
		if err != nil {
			s.log.Error("waking a user", "user", wake.User, "error", err)
			return
		}
		woken()
		return
	}
}

// restore wakes a person of a worker that died from their crash checkpoint
// (pieces of the epoch they still live at). With none, nothing is sent:
// their pages restart clean when the page asks, as without checkpoints.
func (p *Pool) restore(s *slot, peer *channel.Peer, user string, epoch uint64) {
	if p.Offline != nil {
		if digest, ok := p.Offline.Take(s.id, user, epoch); ok {
			// Parked with no quorum: their package, not a checkpoint.
			p.wake(s, peer, user, epoch, digest)
			return
		}
	}
	ck := p.Checkpoints
	if ck == nil {
		return
	}
	pkg, gen, err := ck.Restore(s.id, user, epoch)
	if err != nil {
		s.log.Warn("reading a crash checkpoint: some of the person's pages restart clean", "user", user, "error", err)
	}
	if pkg == nil {
		return
	}
	c, err := peer.Start(&protocol.Envelope{Body: &protocol.Envelope_Wake{Wake: &protocol.Wake{
		User: user, Epoch: epoch, Package: pkg, Checkpoint: true, Generation: gen}}})
	if err != nil {
		ck.Restored(s.id, user, err)
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(p.ctx, time.Minute)
		defer cancel()
		_, err := c.Wait(ctx)
		if err != nil {
			s.log.Error("waking a user from their checkpoint", "user", user, "error", err)
		} else {
			s.log.Info("woke a user from their checkpoint", "user", user, "generation", gen)
		}
		ck.Restored(s.id, user, err)
	}()
}

// StartEnvelope sends one request envelope to a worker without waiting for the
// answer (a Frame goes through Send, for the wake). Envelopes started from
// one goroutine reach the worker in order.
func (p *Pool) StartEnvelope(ctx context.Context, workerID string, env *protocol.Envelope) (*channel.Call, error) {
	if f := env.GetFrame(); f != nil {
		return p.Send(ctx, workerID, f)
	}
	s, err := p.slot(workerID)
	if err != nil {
		return nil, err
	}
	peer, err := s.readyPeer(ctx, p.stopCh())
	if err != nil {
		return nil, err
	}
	switch b := env.Body.(type) {
	case *protocol.Envelope_Freeze:
		// A person not yet back from their checkpoint is woken first: the
		// freeze then hands over what they had, not nothing. They still
		// live at the epoch before the move's.
		if b.Freeze.Epoch > 0 {
			if err := p.beforeUser(ctx, s, peer, b.Freeze.User, b.Freeze.Epoch-1, ""); err != nil {
				return nil, err
			}
		}
	case *protocol.Envelope_Evict:
		// The person's move committed elsewhere: nothing here is theirs.
		p.forget(s, b.Evict.User)
	}
	return peer.Start(env)
}

// forget drops what this slot would wake user from after a crash.
func (p *Pool) forget(s *slot, user string) {
	if p.Checkpoints == nil {
		return
	}
	s.mu.Lock()
	if s.restore[user] {
		delete(s.restore, user)
		s.special.Add(-1)
	}
	s.mu.Unlock()
	p.Checkpoints.Forget(s.id, user, 0)
}
