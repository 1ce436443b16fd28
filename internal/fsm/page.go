package fsm

import (
	"container/heap"
	"slices"

	"github.com/stickyd/stickyd/internal/placement"
)

// MaxPageLimit bounds a page of people: a list asks for more in pages.
const MaxPageLimit = 1000

// UserQuery selects a page of people. Zero fields select everyone.
type UserQuery struct {
	// Worker keeps the people homed on that worker.
	Worker string
	// Group keeps the people homed on a worker of that group (as the
	// agents registered their workers).
	Group string
	// State keeps the people in that state (placement.State*).
	State string
	// After is the cursor of the page before (UserPage.Next); empty for
	// the first page.
	After string
	// Limit is the page's size: 0 means 100, more than MaxPageLimit means
	// MaxPageLimit.
	Limit int
}

// UserPage is a page of people in the maps' order (by name) and the cursor
// of the next page, empty after the last.
type UserPage struct {
	Users []placement.UserInfo `json:"users"`
	Next  string               `json:"next,omitempty"`
}

// UserTally counts the people without listing them.
type UserTally struct {
	Users   int            `json:"users"`
	Conns   int            `json:"conns"`
	State   map[string]int `json:"state"`
	Workers map[string]int `json:"workers"`
	Groups  map[string]int `json:"groups"`
}

// UsersPage returns one page of the people q selects, ordered by name. A
// page costs the people it passes over, never a sort of everyone.
func (f *FSM) UsersPage(q UserQuery) UserPage {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = 100
	case limit > MaxPageLimit:
		limit = MaxPageLimit
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	var workers map[string]bool
	if q.Group != "" {
		workers = map[string]bool{}
		for _, a := range f.state.Agents {
			for w, g := range a.Workers {
				if g == q.Group {
					workers[w] = true
				}
			}
		}
	}
	match := func(r userRec) bool {
		if q.Worker != "" && r.worker != q.Worker {
			return false
		}
		if workers != nil && !workers[r.worker] {
			return false
		}
		if q.State != "" {
			st := ""
			if r.x != nil {
				st = r.x.state
			}
			if st == "" {
				st = placement.StateLive
			}
			if st != q.State {
				return false
			}
		}
		return true
	}
	// The names after the cursor, the first limit+1 that match, merged
	// from the shards' keys in order: a page costs the people it passes
	// over, never a walk of everyone.
	names := make([]string, 0, limit+1)
	f.state.Users.m.sorted(func(shards []*shard[userRec]) {
		h := make(cursorHeap, 0, len(shards))
		for _, sh := range shards {
			j := 0
			if q.After != "" {
				var found bool
				j, found = slices.BinarySearchFunc(sh.keys, q.After, sh.cmpSlot)
				if found {
					j++
				}
			}
			if j < len(sh.keys) {
				h = append(h, shardCursor{sh: sh, at: j})
			}
		}
		heap.Init(&h)
		for len(h) > 0 && len(names) < limit+1 {
			c := &h[0]
			e := &c.sh.ents[c.sh.keys[c.at]]
			if !e.val.ghost() && match(e.val) {
				names = append(names, e.key)
			}
			if c.at++; c.at == len(c.sh.keys) {
				heap.Pop(&h)
			} else {
				heap.Fix(&h, 0)
			}
		}
	})
	var page UserPage
	if len(names) > limit {
		names = names[:limit]
		page.Next = names[limit-1]
	}
	page.Users = make([]placement.UserInfo, len(names))
	for i, u := range names {
		h, _ := f.state.Users.get(u)
		page.Users[i] = info(u, h)
	}
	return page
}

// Tally counts the people by state, worker and group.
func (f *FSM) Tally() UserTally {
	f.mu.RLock()
	defer f.mu.RUnlock()
	t := UserTally{Users: f.state.Users.len(), Conns: f.state.Conns.len(),
		State: map[string]int{}, Workers: make(map[string]int, len(f.load)), Groups: map[string]int{}}
	groupOf := map[string]string{}
	for _, a := range f.state.Agents {
		for w, g := range a.Workers {
			groupOf[w] = g
		}
	}
	for w, n := range f.load {
		if n == 0 {
			continue
		}
		t.Workers[w] = n
		if g, ok := groupOf[w]; ok {
			t.Groups[g] += n
		}
	}
	for st, n := range f.state.Users.states {
		if n > 0 {
			t.State[st] = n
		}
	}
	return t
}

// shardCursor is a place in one shard's sorted keys.
type shardCursor struct {
	sh *shard[userRec]
	at int
}

func (c *shardCursor) key() string { return c.sh.ents[c.sh.keys[c.at]].key }

// cursorHeap orders shard cursors by their next key.
type cursorHeap []shardCursor

func (h cursorHeap) Len() int           { return len(h) }
func (h cursorHeap) Less(i, j int) bool { return h[i].key() < h[j].key() }
func (h cursorHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)        { *h = append(*h, x.(shardCursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
