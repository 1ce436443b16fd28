package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// BinaryEntryType is the binary envelope of a log entry: the type byte of
// the entry it carries, then that entry's body in msgpack instead of JSON
// (fields by the same names; numbers and lengths in binary). The
// entries written by the hot roads (connections, moves, logins, forgets,
// seen stamps) go in it once every server applies it (SetEntryGate);
// every other entry, and every entry until then, stays JSON.
const BinaryEntryType MessageType = 26

// NewestEntryType is the newest entry type this version applies. A server
// says it (the agent's /v1/agent/self), and a writer uses an entry type
// only once every server of the cluster applies it: a rolling update's
// older servers are never sent an entry they would skip. Raise it with
// each new type. A server that applies BinaryEntryType also reads the
// snapshot record recConnsAt.
const NewestEntryType = GatewayCeilingsRequestType

// entryHandle encodes and decodes the bodies of binary entries by the
// names their JSON form uses, so one struct serves both.
var entryHandle = func() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{}
	h.TypeInfos = codec.NewTypeInfos([]string{"json"})
	h.RawToString = true
	return h
}()

// binaryTypes are the entry types written in the binary envelope.
var binaryTypes = map[MessageType]bool{
	ConnectRequestType:      true,
	ConnectBatchRequestType: true,
	LoginRequestType:        true,
	ForgetConnRequestType:   true,
	ForgetConnsRequestType:  true,
	SeenUsersRequestType:    true,
	MoveBatchRequestType:    true,
	MoveBeginRequestType:    true,
	MoveCommitRequestType:   true,
	MoveAbortRequestType:    true,
	WokenRequestType:        true,
	ForgetUsersRequestType:  true,
}

// body is an entry's payload after its type byte: JSON, or msgpack when
// the entry came in the binary envelope.
type body struct {
	b      []byte
	binary bool
}

func (b body) decode(v any) error {
	if b.binary {
		return codec.NewDecoderBytes(b.b, entryHandle).Decode(v)
	}
	return json.Unmarshal(b.b, v)
}

// EncodeBinary builds a log entry of type t in the binary envelope.
func EncodeBinary(t MessageType, v any) ([]byte, error) {
	var b []byte
	if err := codec.NewEncoderBytes(&b, entryHandle).Encode(v); err != nil {
		return nil, fmt.Errorf("encoding log entry %d: %w", t, err)
	}
	return append([]byte{byte(BinaryEntryType), byte(t)}, b...), nil
}

// EntryType is the type of the entry e carries: the type byte, or the
// one inside the binary envelope.
func EntryType(e []byte) MessageType {
	if len(e) >= 2 && MessageType(e[0]) == BinaryEntryType {
		return MessageType(e[1])
	}
	if len(e) == 0 {
		return 0
	}
	return MessageType(e[0])
}

// unwrap splits an entry into its type and body.
func unwrap(e []byte) (MessageType, body, error) {
	if len(e) == 0 {
		return 0, body{}, errors.New("empty log entry")
	}
	t := MessageType(e[0])
	if t != BinaryEntryType {
		return t, body{b: e[1:]}, nil
	}
	if len(e) < 2 {
		return 0, body{}, errors.New("a binary log entry without the type it carries")
	}
	return MessageType(e[1]), body{b: e[2:], binary: true}, nil
}

// SetEntryGate sets what says whether every server of the cluster applies
// entries of a type (the agent asks its peers). Until it is set, this
// process is taken to be alone: everything this version writes is
// allowed.
func (f *FSM) SetEntryGate(allow func(MessageType) bool) { f.gate.Store(&allow) }

func (f *FSM) allows(t MessageType) bool {
	if g := f.gate.Load(); g != nil {
		return (*g)(t)
	}
	return true
}

// EncodeEntry builds a log entry of type t: in the binary envelope when t
// is one of the hot roads' and every server applies it, as JSON
// otherwise.
func (f *FSM) EncodeEntry(t MessageType, v any) ([]byte, error) {
	if binaryTypes[t] && f.allows(BinaryEntryType) {
		return EncodeBinary(t, v)
	}
	return Encode(t, v)
}

// entryGate is the FSM's field for SetEntryGate.
type entryGate = atomic.Pointer[func(MessageType) bool]
