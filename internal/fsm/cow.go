package fsm

import (
	"hash/maphash"
	"maps"
	"slices"
	"sync"
)

// cowShards is how many shards a shardMap has. A snapshot costs this many
// pointers under the lock; the first write to a shard after a snapshot
// costs a copy of that shard alone (1/256 of the map).
const cowShards = 256

var cowSeed = maphash.MakeSeed()

// shardMap is a map from names to values, in shards that a snapshot
// shares instead of copying: frozen takes the shards as they are (the
// maps' lock held for a few microseconds, whatever the population), and a
// write to a shard a snapshot still shares copies that shard first. V must
// be a value that is never changed in place (a struct of plain values, or
// one whose maps and slices are replaced whole): a copied shard shares the
// values' insides with the snapshot.
//
// A shardMap is not safe for concurrent use: the FSM's lock guards it, as
// it guards the plain maps.
type shardMap[V any] struct {
	shards [cowShards]*shard[V]
	n      int
	// gen grows at each snapshot; a shard of an older gen is shared.
	gen uint64
	// indexed is set once a reader asked for the keys in order (sorted):
	// from then on each shard keeps its keys sorted, as they are added
	// and removed. indexMu serializes the readers that build them (a
	// writer holds the FSM's lock alone, so it meets no reader).
	indexMu sync.Mutex
	indexed bool
}

type shard[V any] struct {
	m   map[string]V
	gen uint64
	// keys are m's keys in order, while the map is indexed.
	keys []string
}

// frozenMap is a shardMap as a snapshot took it; nothing writes to it.
type frozenMap[V any] struct {
	shards [cowShards]map[string]V
	n      int
}

func newShardMap[V any]() *shardMap[V] {
	s := &shardMap[V]{}
	for i := range s.shards {
		s.shards[i] = &shard[V]{m: map[string]V{}}
	}
	return s
}

// newShardMapSized is an empty map with room for about n entries.
func newShardMapSized[V any](n int) *shardMap[V] {
	s := &shardMap[V]{}
	per := min(n/cowShards, 1<<16)
	for i := range s.shards {
		s.shards[i] = &shard[V]{m: make(map[string]V, per)}
	}
	return s
}

func shardOf(k string) int {
	return int(maphash.String(cowSeed, k) % cowShards)
}

func (s *shardMap[V]) get(k string) (V, bool) {
	v, ok := s.shards[shardOf(k)].m[k]
	return v, ok
}

func (s *shardMap[V]) has(k string) bool {
	_, ok := s.shards[shardOf(k)].m[k]
	return ok
}

// writable returns k's shard, copied first if a snapshot shares it.
func (s *shardMap[V]) writable(k string) *shard[V] {
	i := shardOf(k)
	sh := s.shards[i]
	if sh.gen != s.gen {
		sh = &shard[V]{m: maps.Clone(sh.m), gen: s.gen, keys: slices.Clone(sh.keys)}
		if sh.m == nil {
			sh.m = map[string]V{}
		}
		s.shards[i] = sh
	}
	return sh
}

func (s *shardMap[V]) put(k string, v V) {
	sh := s.writable(k)
	if _, ok := sh.m[k]; !ok {
		s.n++
		if s.indexed {
			i, _ := slices.BinarySearch(sh.keys, k)
			sh.keys = slices.Insert(sh.keys, i, k)
		}
	}
	sh.m[k] = v
}

func (s *shardMap[V]) del(k string) {
	if !s.has(k) {
		return
	}
	sh := s.writable(k)
	delete(sh.m, k)
	s.n--
	if s.indexed {
		if i, ok := slices.BinarySearch(sh.keys, k); ok {
			sh.keys = slices.Delete(sh.keys, i, i+1)
		}
	}
}

// sorted calls yield with each shard's keys in order. The first call
// sorts them; later writes keep them sorted. The caller holds the FSM's
// read lock; yield must not keep the slices.
func (s *shardMap[V]) sorted(yield func(keys [][]string)) {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if !s.indexed {
		for _, sh := range s.shards {
			// A shard a snapshot shares is read, never written: its
			// sorted keys are a slice of its own.
			keys := make([]string, 0, len(sh.m))
			for k := range sh.m {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			sh.keys = keys
		}
		s.indexed = true
	}
	all := make([][]string, cowShards)
	for i, sh := range s.shards {
		all[i] = sh.keys
	}
	yield(all)
}

func (s *shardMap[V]) len() int { return s.n }

// all calls yield for every entry, in no order, until it returns false.
// yield must not write to the map.
func (s *shardMap[V]) all(yield func(string, V) bool) {
	for _, sh := range s.shards {
		for k, v := range sh.m {
			if !yield(k, v) {
				return
			}
		}
	}
}

// freeze returns the map as it is now, which later writes leave alone.
func (s *shardMap[V]) freeze() *frozenMap[V] {
	f := &frozenMap[V]{n: s.n}
	for i, sh := range s.shards {
		f.shards[i] = sh.m
	}
	s.gen++
	return f
}

func (f *frozenMap[V]) all(yield func(string, V) bool) {
	for _, m := range f.shards {
		for k, v := range m {
			if !yield(k, v) {
				return
			}
		}
	}
}
