package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/move"
	"github.com/stickyd/stickyd/internal/placement"
)

// Groups: each person belongs to the group of the worker holding them. A
// rule may send a person to a group; everyone else belongs to the default
// group. Changing the default (promotion, rollback) or a rule moves the
// people concerned hot, by the one road.

var (
	// ErrNoGroup is returned for a group neither the catalog nor any worker
	// knows.
	ErrNoGroup = errors.New("no such group")
	// ErrNothingToRollBack is returned by Rollback when no previous default
	// is recorded.
	ErrNothingToRollBack = errors.New("no previous default group to roll back to")
)

// SetFallbackDefault names the default group used while the catalog names
// none (the agent's first configured group).
func (s *Supervisor) SetFallbackDefault(group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallbackDefault = group
}

// DefaultGroup is where newcomers and people no rule matches belong.
func (s *Supervisor) DefaultGroup() string {
	if d := s.fsm.Catalog().Default; d != "" {
		return d
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fallbackDefault
}

// Target is the group a person belongs in: the first rule that matches
// them, else the default group.
func (s *Supervisor) Target(user string) string {
	if g, _, ok := s.fsm.Assigned(user); ok {
		return g
	}
	return s.DefaultGroup()
}

// groupExists reports whether the catalog or any known worker has the group.
func (s *Supervisor) groupExists(group string) bool {
	if _, ok := s.fsm.Catalog().Groups[group]; ok {
		return true
	}
	for _, w := range s.workers.Ready() {
		if s.workers.GroupOf(w) == group {
			return true
		}
	}
	return false
}

// PutGroup records a group's recipe in the catalog; every agent then runs
// its workers.
func (s *Supervisor) PutGroup(ctx context.Context, g fsm.GroupEntry) error {
	_, err := s.apply(ctx, fsm.GroupPutRequestType, g)
	return err
}

// GroupUsers counts the people whose worker is in group.
func (s *Supervisor) GroupUsers(group string) int {
	n := 0
	for w, c := range s.fsm.UsersOn() {
		if s.workers.GroupOf(w) == group {
			n += c
		}
	}
	return n
}

// DeleteGroup removes a group from the catalog: refused while anyone is
// placed in it, while it is the default, or while a rule sends people there.
func (s *Supervisor) DeleteGroup(ctx context.Context, group string) error {
	if _, ok := s.fsm.Catalog().Groups[group]; !ok {
		return fmt.Errorf("retiring group %q: %w in the catalog", group, ErrNoGroup)
	}
	if n := s.GroupUsers(group); n > 0 {
		return fmt.Errorf("retiring group %q: %w: %d people are still placed there", group, fsm.ErrGroupInUse, n)
	}
	_, err := s.apply(ctx, fsm.GroupDeleteRequestType, fsm.GroupDeleteRequest{Name: group})
	return err
}

// PutRule adds or replaces an assignment rule. The people it concerns move
// with the next Reconcile.
func (s *Supervisor) PutRule(ctx context.Context, r fsm.Rule) error {
	if !s.groupExists(r.Group) {
		return fmt.Errorf("rule %s: %w %q", r.ID, ErrNoGroup, r.Group)
	}
	_, err := s.apply(ctx, fsm.RulePutRequestType, r)
	return err
}

// DeleteRule removes an assignment rule.
func (s *Supervisor) DeleteRule(ctx context.Context, id string) error {
	_, err := s.apply(ctx, fsm.RuleDeleteRequestType, fsm.RuleDeleteRequest{ID: id})
	return err
}

// Progress is one step of a long operation on many people.
type Progress struct {
	Result move.Result
	Err    error
}

// ReconcileResult sums up a Reconcile.
type ReconcileResult struct {
	// Users is how many people were to move.
	Users  int `json:"users"`
	Moved  int `json:"moved"`
	Failed int `json:"failed"`
}

// Misplaced lists the people whose group is not their target group and
// whom only accepts (nil accepts everyone), sorted by name.
func (s *Supervisor) Misplaced(only func(u placement.UserInfo, group string) bool) []placement.UserInfo {
	var out []placement.UserInfo
	for _, u := range s.Users() {
		cur := s.workers.GroupOf(u.Worker)
		if cur == s.Target(u.User) {
			continue
		}
		if only != nil && !only(u, cur) {
			continue
		}
		out = append(out, u)
	}
	return out
}

// Reconcile moves the given people to their target groups by the one road,
// as one set (parallel people on the road at a time; see move.MoveSet),
// each to the least loaded ready worker of their group. progress, if not
// nil, is called after each move from one goroutine at a time.
func (s *Supervisor) Reconcile(ctx context.Context, users []placement.UserInfo, parallel int, reason string, progress func(move.Result, error)) (ReconcileResult, error) {
	res := ReconcileResult{Users: len(users)}
	pick := s.picker()
	var reqs []move.Request
	for _, u := range users {
		group := s.Target(u.User)
		to, err := pick(u.Worker, func(w string) bool { return w != u.Worker && s.workers.GroupOf(w) == group })
		if err != nil {
			res.Failed++
			if progress != nil {
				progress(move.Result{User: u.User, From: u.Worker, Outcome: move.Failed}, fmt.Errorf("moving %q to group %q: %w", u.User, group, err))
			}
			continue
		}
		reqs = append(reqs, move.Request{User: u.User, To: to})
	}
	s.mover.MoveSet(ctx, reqs, move.Options{Reason: reason, Parallel: parallel}, tally(&res.Moved, &res.Failed, progress))
	return res, ctx.Err()
}

// Promote makes group the default and moves over everyone who now belongs
// there (only those in group from, if from is not empty).
func (s *Supervisor) Promote(ctx context.Context, group, from string, parallel int, progress func(move.Result, error)) (ReconcileResult, error) {
	if !s.groupExists(group) {
		return ReconcileResult{}, fmt.Errorf("promoting %q: %w", group, ErrNoGroup)
	}
	if from != "" && !s.groupExists(from) {
		return ReconcileResult{}, fmt.Errorf("promoting %q from %q: %w %q", group, from, ErrNoGroup, from)
	}
	if err := s.setDefault(ctx, group); err != nil {
		return ReconcileResult{}, fmt.Errorf("promoting %q: %w", group, err)
	}
	users := s.Misplaced(func(_ placement.UserInfo, cur string) bool { return from == "" || cur == from })
	return s.Reconcile(ctx, users, parallel, "promote", progress)
}

// Rollback makes the previous default the default again and moves back
// everyone in the group it replaces who belongs there.
func (s *Supervisor) Rollback(ctx context.Context, parallel int, progress func(move.Result, error)) (string, ReconcileResult, error) {
	c := s.fsm.Catalog()
	if c.Previous == "" {
		return "", ReconcileResult{}, ErrNothingToRollBack
	}
	cur, prev := s.DefaultGroup(), c.Previous
	if err := s.setDefault(ctx, prev); err != nil {
		return prev, ReconcileResult{}, fmt.Errorf("rolling back to %q: %w", prev, err)
	}
	users := s.Misplaced(func(_ placement.UserInfo, g string) bool { return g == cur })
	res, err := s.Reconcile(ctx, users, parallel, "rollback", progress)
	return prev, res, err
}

func (s *Supervisor) setDefault(ctx context.Context, group string) error {
	// Record the effective default first, so that a rollback has somewhere
	// to return to even when the catalog named none.
	if s.fsm.Catalog().Default == "" {
		if d := s.DefaultGroup(); d != "" && d != group {
			if _, err := s.apply(ctx, fsm.SetDefaultRequestType, fsm.SetDefaultRequest{Group: d}); err != nil {
				return err
			}
		}
	}
	_, err := s.apply(ctx, fsm.SetDefaultRequestType, fsm.SetDefaultRequest{Group: group})
	return err
}

// assign moves a person who just logged in to their target group when the
// worker holding them is in another one. It runs in the background: the
// person's next frames wait at the barrier and follow them.
func (s *Supervisor) assign(user string) {
	if s.mover == nil {
		return
	}
	u, ok := s.fsm.User(user)
	if !ok {
		return
	}
	want := s.Target(user)
	if want == "" || s.workers.GroupOf(u.Worker) == want {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := s.MoveToGroup(ctx, user, want, "assign"); err != nil && s.log != nil {
			s.log.Warn("moving a person to their group", "user", user, "group", want, "error", err)
		}
	}()
}

// GroupWorkers lists the ready workers of a group, sorted.
func (s *Supervisor) GroupWorkers(group string) []string {
	var out []string
	for _, w := range s.workers.Ready() {
		if s.workers.GroupOf(w) == group {
			out = append(out, w)
		}
	}
	sort.Strings(out)
	return out
}
