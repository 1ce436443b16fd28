package fsm

import (
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
	"sync"
)

// cowShards is how many shards a shardMap has. A snapshot costs this many
// pointers under the lock; the first write to a shard after a snapshot
// costs a copy of that shard alone (1/256 of the map).
const cowShards = 256

// maxShardSlots bounds the entries of one shard: a ref keeps the shard in
// its top 8 bits and the slot in the low 24 (4 billion entries in all).
const maxShardSlots = 1<<24 - 1

var cowSeed = maphash.MakeSeed()

// ref names an entry of a shardMap for as long as it is in the map: its
// shard in the top 8 bits, its slot in the shard's slab below. A ref stays
// the same across snapshots (a copied shard keeps its slots), so one map
// can point into another by a ref (4 bytes) instead of a name (16 bytes
// and the name's own copy).
type ref uint32

func makeRef(shard int, slot uint32) ref { return ref(uint32(shard)<<24 | slot) }
func (r ref) shard() int                 { return int(r >> 24) }
func (r ref) slot() uint32               { return uint32(r) & maxShardSlots }

// shardMap is a map from names to values, in shards that a snapshot
// shares instead of copying: freeze takes the shards as they are (the
// maps' lock held for a few microseconds, whatever the population), and a
// write to a shard a snapshot still shares copies that shard first. V must
// be a value that is never changed in place (a struct of plain values, or
// one whose maps and slices are replaced whole): a copied shard shares the
// values' insides with the snapshot.
//
// A shard is a slab of entries and an open-addressed index into it of 4
// bytes a slot, kept between 3/8 and 3/4 full: a Go map of the same
// entries costs the whole entry for every empty slot, and sits half empty
// after each of its splits. A removed entry's slot is reused by the next
// entry added, so refs to the entries that stay never change.
//
// A shardMap is not safe for concurrent use: the FSM's lock guards it, as
// it guards the plain maps.
type shardMap[V any] struct {
	shards [cowShards]*shard[V]
	n      int
	// gen grows at each snapshot; a shard of an older gen is shared.
	gen uint64
	// indexed is set once a reader asked for the keys in order (sorted):
	// from then on each shard keeps its slots sorted by key, as entries
	// are added and removed. indexMu serializes the readers that build
	// them (a writer holds the FSM's lock alone, so it meets no reader).
	indexMu sync.Mutex
	indexed bool
}

type shard[V any] struct {
	gen uint64
	// idx is the index, a power of two long: 0 is an empty slot, any
	// other value is the slot in ents plus one, below the top 8 bits,
	// which hold 8 bits of the key's hash (most probes that would compare
	// another key are told apart without reading it).
	idx  []uint32
	ents []entry[V]
	// live has a bit set for each slot of ents in use; free lists the
	// others, to be reused.
	live []uint64
	free []uint32
	n    int
	// keys are the slots in use, in key order, while the map is indexed.
	keys []uint32
}

type entry[V any] struct {
	key string
	val V
}

// frozenMap is a shardMap as a snapshot took it; nothing writes to it.
type frozenMap[V any] struct {
	shards [cowShards]*shard[V]
	n      int
}

func newShardMap[V any]() *shardMap[V] {
	s := &shardMap[V]{}
	for i := range s.shards {
		s.shards[i] = &shard[V]{}
	}
	return s
}

// newShardMapSized is an empty map with room for about n entries.
func newShardMapSized[V any](n int) *shardMap[V] {
	s := newShardMap[V]()
	per := min(n/cowShards+n/cowShards/8, maxShardSlots)
	if per < 8 {
		return s
	}
	for _, sh := range s.shards {
		sh.ents = make([]entry[V], 0, per)
		sh.idx = make([]uint32, indexSize(per))
	}
	return s
}

// indexSize is the index length that holds n entries at most 3/4 full.
func indexSize(n int) int {
	return max(8, 1<<bits.Len(uint(n*4/3)))
}

func hashOf(k string) uint64 { return maphash.String(cowSeed, k) }

func shardOf(h uint64) int { return int(h % cowShards) }

// tagOf is the 8 bits of h an index slot keeps; home is where the probe
// for h starts in an index of mask+1 slots.
func tagOf(h uint64) uint32             { return uint32(h>>56) << 24 }
func home(h uint64, mask uint32) uint32 { return uint32(h>>8) & mask }

// find returns the index position of k and its slot, or the empty index
// position where k would go.
func (sh *shard[V]) find(k string, h uint64) (pos, slot uint32, ok bool) {
	if len(sh.idx) == 0 {
		return 0, 0, false
	}
	mask := uint32(len(sh.idx) - 1)
	tag := tagOf(h)
	for pos = home(h, mask); ; pos = (pos + 1) & mask {
		v := sh.idx[pos]
		if v == 0 {
			return pos, 0, false
		}
		if v&0xff000000 == tag {
			slot = v&maxShardSlots - 1
			if sh.ents[slot].key == k {
				return pos, slot, true
			}
		}
	}
}

func (sh *shard[V]) isLive(slot uint32) bool {
	return int(slot>>6) < len(sh.live) && sh.live[slot>>6]&(1<<(slot&63)) != 0
}

// grow doubles the index (or makes the first), placing every entry again.
func (sh *shard[V]) grow() {
	size := max(8, 2*len(sh.idx))
	idx := make([]uint32, size)
	mask := uint32(size - 1)
	for slot := range sh.ents {
		if !sh.isLive(uint32(slot)) {
			continue
		}
		h := hashOf(sh.ents[slot].key)
		pos := home(h, mask)
		for idx[pos] != 0 {
			pos = (pos + 1) & mask
		}
		idx[pos] = tagOf(h) | (uint32(slot) + 1)
	}
	sh.idx = idx
}

// insert adds k, not in the shard yet, at the empty index position pos;
// it returns the entry's slot.
func (sh *shard[V]) insert(k string, h uint64, pos uint32, v V) uint32 {
	var slot uint32
	if n := len(sh.free); n > 0 {
		slot = sh.free[n-1]
		sh.free = sh.free[:n-1]
		sh.ents[slot] = entry[V]{k, v}
	} else {
		slot = uint32(len(sh.ents))
		sh.ents = append(sh.ents, entry[V]{k, v})
		if int(slot>>6) >= len(sh.live) {
			sh.live = append(sh.live, 0)
		}
	}
	sh.live[slot>>6] |= 1 << (slot & 63)
	sh.idx[pos] = tagOf(h) | (slot + 1)
	sh.n++
	return slot
}

// remove takes out the entry at index position pos: the entries that
// follow it in their probe run are shifted back, so that no probe ever
// stops short of its key.
func (sh *shard[V]) remove(pos uint32) {
	mask := uint32(len(sh.idx) - 1)
	slot := sh.idx[pos]&maxShardSlots - 1
	i := pos
	for j := (i + 1) & mask; sh.idx[j] != 0; j = (j + 1) & mask {
		s := sh.idx[j]&maxShardSlots - 1
		hj := home(hashOf(sh.ents[s].key), mask)
		// The entry at j may fill the hole at i unless its home lies in
		// (i, j], cyclically.
		var stays bool
		if i <= j {
			stays = i < hj && hj <= j
		} else {
			stays = i < hj || hj <= j
		}
		if !stays {
			sh.idx[i] = sh.idx[j]
			i = j
		}
	}
	sh.idx[i] = 0
	sh.ents[slot] = entry[V]{}
	sh.live[slot>>6] &^= 1 << (slot & 63)
	sh.free = append(sh.free, slot)
	sh.n--
}

func (s *shardMap[V]) get(k string) (V, bool) {
	h := hashOf(k)
	sh := s.shards[shardOf(h)]
	if _, slot, ok := sh.find(k, h); ok {
		return sh.ents[slot].val, true
	}
	var zero V
	return zero, false
}

// lookup returns k's ref and value.
func (s *shardMap[V]) lookup(k string) (ref, V, bool) {
	h := hashOf(k)
	i := shardOf(h)
	sh := s.shards[i]
	if _, slot, ok := sh.find(k, h); ok {
		return makeRef(i, slot), sh.ents[slot].val, true
	}
	var zero V
	return 0, zero, false
}

func (s *shardMap[V]) has(k string) bool {
	_, _, ok := s.lookup(k)
	return ok
}

// at returns the entry r names; r must be in the map.
func (s *shardMap[V]) at(r ref) (string, V) {
	e := &s.shards[r.shard()].ents[r.slot()]
	return e.key, e.val
}

// setAt replaces the value of the entry r names; r must be in the map.
func (s *shardMap[V]) setAt(r ref, v V) {
	s.writable(r.shard()).ents[r.slot()].val = v
}

// writable returns shard i, copied first if a snapshot shares it.
func (s *shardMap[V]) writable(i int) *shard[V] {
	sh := s.shards[i]
	if sh.gen != s.gen {
		sh = &shard[V]{
			gen:  s.gen,
			idx:  slices.Clone(sh.idx),
			ents: slices.Clone(sh.ents),
			live: slices.Clone(sh.live),
			free: slices.Clone(sh.free),
			n:    sh.n,
			keys: slices.Clone(sh.keys),
		}
		s.shards[i] = sh
	}
	return sh
}

// put sets k to v, and returns k's ref.
func (s *shardMap[V]) put(k string, v V) ref {
	h := hashOf(k)
	i := shardOf(h)
	sh := s.writable(i)
	pos, slot, ok := sh.find(k, h)
	if ok {
		sh.ents[slot].val = v
		return makeRef(i, slot)
	}
	if len(sh.idx) == 0 || (sh.n+1)*4 > len(sh.idx)*3 {
		sh.grow()
		pos, _, _ = sh.find(k, h)
	}
	if len(sh.free) == 0 && len(sh.ents) >= maxShardSlots {
		// 4 billion entries: memory ran out long before.
		panic("fsm: a shard of the maps is full")
	}
	slot = sh.insert(k, h, pos, v)
	s.n++
	if s.indexed {
		at, _ := slices.BinarySearchFunc(sh.keys, k, sh.cmpSlot)
		sh.keys = slices.Insert(sh.keys, at, slot)
	}
	return makeRef(i, slot)
}

// cmpSlot orders a slot's key against k.
func (sh *shard[V]) cmpSlot(slot uint32, k string) int {
	return strings.Compare(sh.ents[slot].key, k)
}

func (s *shardMap[V]) del(k string) {
	h := hashOf(k)
	i := shardOf(h)
	if _, _, ok := s.shards[i].find(k, h); !ok {
		return
	}
	sh := s.writable(i)
	pos, slot, _ := sh.find(k, h)
	if s.indexed {
		if at, ok := slices.BinarySearchFunc(sh.keys, k, sh.cmpSlot); ok && sh.keys[at] == slot {
			sh.keys = slices.Delete(sh.keys, at, at+1)
		}
	}
	sh.remove(pos)
	s.n--
}

// sorted calls yield with the shards, each keeping its slots in key order
// (shard.keys). The first call sorts them; later writes keep them sorted.
// The caller holds the FSM's read lock; yield must not keep the shards.
func (s *shardMap[V]) sorted(yield func(shards []*shard[V])) {
	s.indexMu.Lock()
	defer s.indexMu.Unlock()
	if !s.indexed {
		for _, sh := range s.shards {
			// A shard a snapshot shares is read, never written: its
			// sorted slots are a slice of its own, which the snapshot
			// never reads.
			keys := make([]uint32, 0, sh.n)
			for slot := range sh.ents {
				if sh.isLive(uint32(slot)) {
					keys = append(keys, uint32(slot))
				}
			}
			slices.SortFunc(keys, func(a, b uint32) int {
				return strings.Compare(sh.ents[a].key, sh.ents[b].key)
			})
			sh.keys = keys
		}
		s.indexed = true
	}
	yield(s.shards[:])
}

func (s *shardMap[V]) len() int { return s.n }

// all calls yield for every entry, in no order, until it returns false.
// yield must not write to the map.
func (s *shardMap[V]) all(yield func(string, V) bool) {
	allOf(s.shards[:], yield)
}

func allOf[V any](shards []*shard[V], yield func(string, V) bool) {
	allRefsOf(shards, func(_ ref, k string, v V) bool { return yield(k, v) })
}

// walkChunk is how many slots a walk reads under one hold of the lock.
const walkChunk = 1024

// eachFrom calls yield for the entries in slots [from, from+walkChunk) of
// the shard, and returns the slot to go on from (0: the shard is done).
// Slots stay the same across copies of the shard, so a walk goes on from
// there in whatever shard the map holds at its next hold of the lock.
func (sh *shard[V]) eachFrom(from int, yield func(string, V)) int {
	end := min(from+walkChunk, len(sh.ents))
	for w := from >> 6; w<<6 < end; w++ {
		word := sh.live[w]
		for word != 0 {
			b := bits.TrailingZeros64(word)
			word &^= 1 << b
			if slot := w<<6 + b; slot >= from && slot < end {
				e := &sh.ents[slot]
				yield(e.key, e.val)
			}
		}
	}
	if end >= len(sh.ents) {
		return 0
	}
	return end
}

func allRefsOf[V any](shards []*shard[V], yield func(ref, string, V) bool) {
	for i, sh := range shards {
		for w, word := range sh.live {
			for word != 0 {
				b := bits.TrailingZeros64(word)
				word &^= 1 << b
				slot := uint32(w<<6 + b)
				e := &sh.ents[slot]
				if !yield(makeRef(i, slot), e.key, e.val) {
					return
				}
			}
		}
	}
}

// freeze returns the map as it is now, which later writes leave alone.
func (s *shardMap[V]) freeze() *frozenMap[V] {
	f := &frozenMap[V]{shards: s.shards, n: s.n}
	s.gen++
	return f
}

func (f *frozenMap[V]) all(yield func(string, V) bool) { allOf(f.shards[:], yield) }

// allRefs is all, with each entry's ref.
func (f *frozenMap[V]) allRefs(yield func(ref, string, V) bool) { allRefsOf(f.shards[:], yield) }

// at returns the entry r names, as the snapshot took it.
func (f *frozenMap[V]) at(r ref) (string, V) {
	e := &f.shards[r.shard()].ents[r.slot()]
	return e.key, e.val
}
