package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// The snapshot format. A snapshot is the magic, a version byte, then
// records: a type byte, the payload's length (uvarint) and the payload.
// The people and their connections go in msgpack chunks of columns (the
// bulk of the maps, written from the shards a snapshot shares, never copied
// under the lock); the rest of the state, small, goes in one JSON record.
// The last record (recEnd) counts what came before it, so a cut snapshot
// is refused, not restored in part.
//
// Record types are append-only; a version that meets a type it does not
// know refuses the snapshot (a newer leader does not send one to an older
// follower until all servers run the newer version). Snapshots written as
// one JSON document (the format before this one, starting with '{') are
// still read.
const (
	snapshotMagic   = "SKYM"
	snapshotVersion = 1

	recEnd   byte = 0
	recRest  byte = 1
	recUsers byte = 2
	recConns byte = 3
	// recSizes comes first after the rest: how many people and
	// connections follow, so the maps are made at their size at once.
	recSizes byte = 4
	// recConnsAt is connections that name their person by its place
	// among the people written before them (connsAtChunk): a restore
	// finds the person without looking the name up. It is written once
	// every server reads it (FSM.SetEntryGate, BinaryEntryType).
	recConnsAt byte = 5
)

// chunkSize is how many people or connections one record holds.
const chunkSize = 4096

// maxRecordBytes bounds one record: a damaged length is refused, not
// allocated.
const maxRecordBytes = 256 << 20

var msgpackHandle = &codec.MsgpackHandle{}

// usersChunk is people in columns: the i-th of each slice is the i-th
// person's. Workers is the chunk's table of worker names that Worker
// indexes.
type usersChunk struct {
	Names    []string            `codec:"n"`
	Workers  []string            `codec:"wt"`
	Worker   []uint32            `codec:"w"`
	Epoch    []uint64            `codec:"e"`
	Since    []uint64            `codec:"s"`
	Conns    []int64             `codec:"c"`
	State    []string            `codec:"st"`
	MovingTo []string            `codec:"m"`
	Package  []string            `codec:"p"`
	Attrs    []map[string]string `codec:"a"`
	Seen     []int64             `codec:"sn"`
	// table is where each worker of Workers is, while a chunk is filled
	// (not written).
	table map[string]uint32
}

// connsChunk is connections in columns.
type connsChunk struct {
	Names []string `codec:"n"`
	User  []string `codec:"u"`
	Seen  []int64  `codec:"s"`
}

// connsAtChunk is connections in columns, each naming its person by
// Person: the person's place among the people of the snapshot, plus one.
// A connection whose person is not among them (0) names it in User, which
// is empty otherwise.
type connsAtChunk struct {
	Names  []string `codec:"n"`
	Person []uint64 `codec:"p"`
	User   []string `codec:"u"`
	Seen   []int64  `codec:"s"`
}

// endRecord counts the people and connections written before it.
type endRecord struct {
	Users uint64 `codec:"u"`
	Conns uint64 `codec:"c"`
}

// Snapshot takes the maps as they are. The people and connections are
// shared with the live maps (cow.go), not copied: the lock is held for the
// few hundred pointers of the shards and a copy of the small rest.
// Encoding happens in Persist, off the lock.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := &snapshot{
		rest: f.restLocked(),
	}
	s.users = f.state.Users.freeze()
	s.conns = f.state.Conns.freeze(s.users)
	s.connsAt = f.allows(BinaryEntryType)
	return s, nil
}

// restLocked copies the state but the people and their connections.
func (f *FSM) restLocked() *State {
	s := &State{Agents: make(map[string]*AgentEntry, len(f.state.Agents))}
	for k, v := range f.state.Agents {
		c := *v
		s.Agents[k] = &c
	}
	s.Catalog = f.state.Catalog.clone()
	if f.state.Store != nil {
		s.Store = f.state.Store.Clone()
	}
	if len(f.state.Tables) > 0 {
		s.Tables = make(map[string][]string, len(f.state.Tables))
		for w, ts := range f.state.Tables {
			s.Tables[w] = ts // replaced whole on change, never mutated
		}
	}
	s.Gateway = cloneGateway(f.state.Gateway)
	s.CookieRing = f.state.CookieRing.clone()
	s.TornDown = f.state.TornDown // replaced, never mutated
	if len(f.state.Jobs) > 0 {
		s.Jobs = make(map[string]*JobRecord, len(f.state.Jobs))
		for id, j := range f.state.Jobs {
			c := *j
			s.Jobs[id] = &c
		}
	}
	if len(f.state.Maintenance) > 0 {
		s.Maintenance = make(map[string]*MaintenanceEntry, len(f.state.Maintenance))
		for b, e := range f.state.Maintenance {
			c := *e
			s.Maintenance[b] = &c
		}
	}
	return s
}

type snapshot struct {
	users *frozenUsers
	conns *frozenConns
	rest  *State
	// connsAt writes the connections as recConnsAt records.
	connsAt bool
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.write(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("writing snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

// write encodes the snapshot to w.
func (s *snapshot) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	rw := &recordWriter{w: bw}
	if _, err := bw.WriteString(snapshotMagic); err != nil {
		return err
	}
	if err := bw.WriteByte(snapshotVersion); err != nil {
		return err
	}
	rest, err := json.Marshal(s.rest)
	if err != nil {
		return fmt.Errorf("encoding the maps' rest: %w", err)
	}
	if err := rw.raw(recRest, rest); err != nil {
		return err
	}
	if err := rw.encode(recSizes, &endRecord{Users: uint64(s.users.n), Conns: uint64(s.conns.m.n)}); err != nil {
		return err
	}
	var (
		uc  usersChunk
		end endRecord
		// at is each person's place in the snapshot plus one, by shard
		// and slot, for the connections to name (recConnsAt).
		at    [cowShards][]uint32
		users = chunkWriter{rw: rw, typ: recUsers, c: &uc, n: &end.Users}
	)
	place := uint32(0)
	s.users.m.allRefs(func(r ref, name string, rec userRec) bool {
		if rec.ghost() {
			return true
		}
		if s.connsAt {
			sh := r.shard()
			if at[sh] == nil {
				at[sh] = make([]uint32, len(s.users.m.shards[sh].ents))
			}
			place++
			at[sh][r.slot()] = place
		}
		uc.add(name, rec.unpack())
		err = users.added()
		return err == nil
	})
	if err == nil {
		err = users.flush()
	}
	if err != nil {
		return err
	}
	if s.connsAt {
		err = s.writeConnsAt(rw, &end, &at)
	} else {
		err = s.writeConns(rw, &end)
	}
	if err != nil {
		return err
	}
	if err := rw.encode(recEnd, &end); err != nil {
		return err
	}
	return bw.Flush()
}

// recordWriter writes records: a type byte, a length, the payload.
type recordWriter struct {
	w   *bufio.Writer
	buf []byte
	enc *codec.Encoder
}

func (rw *recordWriter) encode(typ byte, v any) error {
	rw.buf = rw.buf[:0]
	if rw.enc == nil {
		rw.enc = codec.NewEncoderBytes(&rw.buf, msgpackHandle)
	} else {
		rw.enc.ResetBytes(&rw.buf)
	}
	if err := rw.enc.Encode(v); err != nil {
		return fmt.Errorf("encoding a record of type %d: %w", typ, err)
	}
	return rw.raw(typ, rw.buf)
}

func (rw *recordWriter) raw(typ byte, payload []byte) error {
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = typ
	n := binary.PutUvarint(hdr[1:], uint64(len(payload)))
	if _, err := rw.w.Write(hdr[:1+n]); err != nil {
		return err
	}
	_, err := rw.w.Write(payload)
	return err
}

// errSnapshotCut is a snapshot that ends before its end record.
var errSnapshotCut = errors.New("the snapshot ends before its end record")

// Restore replaces the maps with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	s, err := readSnapshot(bufio.NewReaderSize(rc, 1<<20))
	if err != nil {
		return fmt.Errorf("decoding snapshot: %w", err)
	}
	if s.Agents == nil {
		s.Agents = map[string]*AgentEntry{}
	}
	load := map[string]int{}
	names := map[string]string{}
	s.Users.all(func(_ string, u User) bool {
		load[u.Worker]++
		names[u.Worker] = u.Worker
		return true
	})
	f.mu.Lock()
	f.state, f.load, f.names = s, load, names
	f.changes.everyoneLocked()
	for u, ch := range f.watch {
		close(ch)
		delete(f.watch, u)
	}
	f.catalogChangedLocked()
	f.maintenanceChangedLocked()
	f.gatewayRestoredLocked()
	if f.ringCh != nil {
		close(f.ringCh)
		f.ringCh = nil
	}
	for id, ch := range f.grantWatch {
		close(ch)
		delete(f.grantWatch, id)
	}
	f.mu.Unlock()
	return nil
}

// readSnapshot decodes a snapshot of either format.
func readSnapshot(r *bufio.Reader) (*State, error) {
	head, err := r.Peek(len(snapshotMagic) + 1)
	if err != nil && len(head) == 0 {
		return nil, fmt.Errorf("reading the snapshot's head: %w", err)
	}
	if len(head) > 0 && head[0] == '{' {
		return readJSONSnapshot(r)
	}
	if len(head) < len(snapshotMagic)+1 || string(head[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("not a snapshot of the maps (unknown head)")
	}
	if v := head[len(snapshotMagic)]; v != snapshotVersion {
		return nil, fmt.Errorf("snapshot version %d; this version reads %d", v, snapshotVersion)
	}
	if _, err := r.Discard(len(head)); err != nil {
		return nil, err
	}
	s := newState()
	var (
		users, conns uint64
		// refs are the people restored, in the snapshot's order; holds
		// counts the connections of each that came in recConnsAt.
		refs    []ref
		holds   []uint32
		payload []byte
		dec     *codec.Decoder
		sawRest bool
	)
	decode := func(v any) error {
		if dec == nil {
			dec = codec.NewDecoderBytes(payload, msgpackHandle)
		} else {
			dec.ResetBytes(payload)
		}
		return dec.Decode(v)
	}
	for {
		typ, err := r.ReadByte()
		if err == io.EOF {
			return nil, errSnapshotCut
		}
		if err != nil {
			return nil, err
		}
		n, err := binary.ReadUvarint(r)
		if err != nil {
			return nil, errSnapshotCut
		}
		if n > maxRecordBytes {
			return nil, fmt.Errorf("a record of %d bytes (at most %d)", n, maxRecordBytes)
		}
		if cap(payload) < int(n) {
			payload = make([]byte, n)
		}
		payload = payload[:n]
		if _, err := io.ReadFull(r, payload); err != nil {
			return nil, errSnapshotCut
		}
		switch typ {
		case recRest:
			users, conns := s.Users, s.Conns
			if err := json.Unmarshal(payload, s); err != nil {
				return nil, fmt.Errorf("decoding the maps' rest: %w", err)
			}
			s.Users, s.Conns = users, conns
			sawRest = true
		case recSizes:
			var sz endRecord
			if err := decode(&sz); err != nil {
				return nil, fmt.Errorf("decoding the sizes: %w", err)
			}
			s.Users = newUserMapSized(int(min(sz.Users, 1<<32)))
			s.Conns = newConnMapSized(s.Users, int(min(sz.Conns, 1<<32)))
		case recUsers:
			var uc usersChunk
			if err := decode(&uc); err != nil {
				return nil, fmt.Errorf("decoding people: %w", err)
			}
			if err := uc.addTo(s.Users, &refs); err != nil {
				return nil, err
			}
			holds = append(holds, make([]uint32, len(refs)-len(holds))...)
			users += uint64(len(uc.Names))
		case recConns:
			var cc connsChunk
			if err := decode(&cc); err != nil {
				return nil, fmt.Errorf("decoding connections: %w", err)
			}
			if len(cc.User) != len(cc.Names) || len(cc.Seen) != len(cc.Names) {
				return nil, errors.New("a chunk of connections with columns of different lengths")
			}
			for i, name := range cc.Names {
				s.Conns.put(name, Conn{User: cc.User[i], Seen: cc.Seen[i]})
			}
			conns += uint64(len(cc.Names))
		case recConnsAt:
			var cc connsAtChunk
			if err := decode(&cc); err != nil {
				return nil, fmt.Errorf("decoding connections: %w", err)
			}
			if len(cc.Person) != len(cc.Names) || len(cc.User) != len(cc.Names) || len(cc.Seen) != len(cc.Names) {
				return nil, errors.New("a chunk of connections with columns of different lengths")
			}
			for i, name := range cc.Names {
				switch p := cc.Person[i]; {
				case p == 0:
					s.Conns.put(name, Conn{User: cc.User[i], Seen: cc.Seen[i]})
				case p > uint64(len(refs)):
					return nil, fmt.Errorf("connection %q of person %d; %d people came before it", name, p, len(refs))
				default:
					if err := s.Conns.restoreRef(name, refs[p-1], cc.Seen[i]); err != nil {
						return nil, err
					}
					holds[p-1]++
				}
			}
			conns += uint64(len(cc.Names))
		case recEnd:
			var end endRecord
			if err := decode(&end); err != nil {
				return nil, fmt.Errorf("decoding the end record: %w", err)
			}
			if !sawRest || end.Users != users || end.Conns != conns {
				return nil, fmt.Errorf("the snapshot counts %d people and %d connections, holds %d and %d", end.Users, end.Conns, users, conns)
			}
			for i, n := range holds {
				if n > 0 {
					s.Users.holdRefs(refs[i], n)
				}
			}
			return s, nil
		default:
			return nil, fmt.Errorf("a record of unknown type %d (written by a newer version)", typ)
		}
	}
}

// writeConns writes the connections as recConns records, naming their
// people.
func (s *snapshot) writeConns(rw *recordWriter, end *endRecord) error {
	var (
		cc  connsChunk
		err error
		w   = chunkWriter{rw: rw, typ: recConns, c: &cc, n: &end.Conns}
	)
	s.conns.all(func(name string, c Conn) bool {
		cc.Names = append(cc.Names, name)
		cc.User = append(cc.User, c.User)
		cc.Seen = append(cc.Seen, c.Seen)
		err = w.added()
		return err == nil
	})
	if err != nil {
		return err
	}
	return w.flush()
}

// writeConnsAt writes the connections as recConnsAt records: at is the
// people's places, by shard and slot.
func (s *snapshot) writeConnsAt(rw *recordWriter, end *endRecord, at *[cowShards][]uint32) error {
	var (
		cc  connsAtChunk
		err error
		w   = chunkWriter{rw: rw, typ: recConnsAt, c: &cc, n: &end.Conns}
	)
	s.conns.m.all(func(name string, c connRec) bool {
		var place uint32
		if p := at[c.user.shard()]; int(c.user.slot()) < len(p) {
			place = p[c.user.slot()]
		}
		user := ""
		if place == 0 {
			user, _ = s.users.m.at(c.user)
		}
		cc.Names = append(cc.Names, name)
		cc.Person = append(cc.Person, uint64(place))
		cc.User = append(cc.User, user)
		cc.Seen = append(cc.Seen, int64(c.seen))
		err = w.added()
		return err == nil
	})
	if err != nil {
		return err
	}
	return w.flush()
}

// chunk is a record's columns, filled a row at a time.
type chunk interface {
	rows() int
	reset()
}

// chunkWriter writes its chunk as a record of typ each time it holds
// chunkSize rows, and what is left at flush, counting the rows in n.
type chunkWriter struct {
	rw  *recordWriter
	typ byte
	c   chunk
	n   *uint64
}

// added is called after each row added to the chunk.
func (w chunkWriter) added() error {
	if w.c.rows() < chunkSize {
		return nil
	}
	return w.flush()
}

func (w chunkWriter) flush() error {
	n := w.c.rows()
	if n == 0 {
		return nil
	}
	*w.n += uint64(n)
	err := w.rw.encode(w.typ, w.c)
	w.c.reset()
	return err
}

func (cc *connsChunk) rows() int { return len(cc.Names) }
func (cc *connsChunk) reset() {
	cc.Names, cc.User, cc.Seen = cc.Names[:0], cc.User[:0], cc.Seen[:0]
}

func (cc *connsAtChunk) rows() int { return len(cc.Names) }
func (cc *connsAtChunk) reset() {
	cc.Names, cc.Person, cc.User, cc.Seen = cc.Names[:0], cc.Person[:0], cc.User[:0], cc.Seen[:0]
}

func (uc *usersChunk) rows() int { return len(uc.Names) }

// add appends a person to the chunk.
func (uc *usersChunk) add(name string, u User) {
	w, ok := uc.table[u.Worker]
	if !ok {
		if uc.table == nil {
			uc.table = map[string]uint32{}
		}
		w = uint32(len(uc.Workers))
		uc.table[u.Worker] = w
		uc.Workers = append(uc.Workers, u.Worker)
	}
	uc.Names = append(uc.Names, name)
	uc.Worker = append(uc.Worker, w)
	uc.Epoch = append(uc.Epoch, u.Epoch)
	uc.Since = append(uc.Since, u.Since)
	uc.Conns = append(uc.Conns, int64(u.Conns))
	uc.State = append(uc.State, u.State)
	uc.MovingTo = append(uc.MovingTo, u.MovingTo)
	uc.Package = append(uc.Package, u.Package)
	uc.Attrs = append(uc.Attrs, u.Attrs)
	uc.Seen = append(uc.Seen, u.Seen)
}

// reset empties the chunk, keeping its columns' room.
func (uc *usersChunk) reset() {
	uc.Names, uc.Workers, uc.Worker = uc.Names[:0], uc.Workers[:0], uc.Worker[:0]
	uc.Epoch, uc.Since, uc.Conns, uc.State = uc.Epoch[:0], uc.Since[:0], uc.Conns[:0], uc.State[:0]
	uc.MovingTo, uc.Package, uc.Seen = uc.MovingTo[:0], uc.Package[:0], uc.Seen[:0]
	clear(uc.Attrs) // the maps they held are the live ones': not kept
	uc.Attrs = uc.Attrs[:0]
	clear(uc.table)
}

// addTo puts the chunk's people in m, and appends their refs to refs.
func (uc *usersChunk) addTo(m *userMap, refs *[]ref) error {
	n := len(uc.Names)
	for _, col := range []int{len(uc.Worker), len(uc.Epoch), len(uc.Since), len(uc.Conns), len(uc.State), len(uc.MovingTo), len(uc.Package), len(uc.Attrs), len(uc.Seen)} {
		if col != n {
			return errors.New("a chunk of people with columns of different lengths")
		}
	}
	for i, name := range uc.Names {
		w := uc.Worker[i]
		if int(w) >= len(uc.Workers) {
			return fmt.Errorf("person %q on worker %d of a table of %d", name, w, len(uc.Workers))
		}
		*refs = append(*refs, m.put(name, User{Worker: uc.Workers[w], Epoch: uc.Epoch[i], Since: uc.Since[i], Conns: int(uc.Conns[i]),
			State: uc.State[i], MovingTo: uc.MovingTo[i], Package: uc.Package[i], Attrs: uc.Attrs[i], Seen: uc.Seen[i]}))
	}
	return nil
}

// legacyState is the snapshot as one JSON document, as versions before the
// record format wrote it.
type legacyState struct {
	State
	Conns    map[string]string `json:"conns"`
	ConnSeen map[string]int64  `json:"conn_seen,omitempty"`
	Users    map[string]*User  `json:"users"`
}

func readJSONSnapshot(r io.Reader) (*State, error) {
	var l legacyState
	if err := json.NewDecoder(r).Decode(&l); err != nil {
		return nil, err
	}
	s := l.State
	s.Users = newUserMap()
	s.Conns = newConnMap(s.Users)
	for name, u := range l.Users {
		if u != nil {
			s.Users.put(name, *u)
		}
	}
	for name, user := range l.Conns {
		s.Conns.put(name, Conn{User: user, Seen: l.ConnSeen[name]})
	}
	return &s, nil
}

// EncodeSnapshot writes the maps as a snapshot (for tests and tools that
// take one without raft).
func (f *FSM) EncodeSnapshot(w io.Writer) error {
	s, err := f.Snapshot()
	if err != nil {
		return err
	}
	return s.(*snapshot).write(w)
}

// DecodeSnapshot reads a snapshot from b into a new FSM.
func DecodeSnapshot(b []byte) (*FSM, error) {
	f := New()
	if err := f.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		return nil, err
	}
	return f, nil
}

// SnapshotShape is what a snapshot holds, counted: for tools and tests
// that look at a snapshot without restoring it into a server's maps.
type SnapshotShape struct {
	Users int `json:"users"`
	Conns int `json:"conns"`
	// StampedConns counts the connections a front has seen (seen.go).
	StampedConns int `json:"stamped_conns"`
	// RestBytes is the size of the state beside the people and their
	// connections (agents, catalog, store, gateway, jobs...), as JSON.
	RestBytes int `json:"rest_bytes"`
}

// ShapeOf counts what the snapshot b holds (either format).
func ShapeOf(b []byte) (SnapshotShape, error) {
	f, err := DecodeSnapshot(b)
	if err != nil {
		return SnapshotShape{}, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := SnapshotShape{Users: f.state.Users.len(), Conns: f.state.Conns.len()}
	f.state.Conns.all(func(_ string, c Conn) bool {
		if c.Seen != 0 {
			s.StampedConns++
		}
		return true
	})
	rest, err := json.Marshal(f.restLocked())
	if err != nil {
		return SnapshotShape{}, err
	}
	s.RestBytes = len(rest)
	return s, nil
}
