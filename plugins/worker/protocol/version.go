// Package protocol owns the wire format of the channel between a host and a
// worker: the protobuf Envelope and everything it carries, and the protocol
// version both sides compare in the handshake. It is shared by the host and
// the SDK, and lives in the SDK's module so that an application's worker
// needs nothing else of stickyd; it is not an API for applications. It knows
// nothing of the supervisor, the front or the SDK; it must never import them.
//
// The Go code in stickyd.pb.go and stickyd_grpc.pb.go is generated from
// stickyd.proto by `make proto` and committed.
package protocol

// Version is the channel protocol version. A worker announces it in its Hello;
// a host refuses a worker whose version differs. Bump it only for changes an
// older peer cannot ignore (protobuf already tolerates added fields).
const Version uint32 = 1

// AnonymousPrefix starts the user key of a connection whose site has not yet
// declared who the person is. The anonymous user of connection c is
// AnonymousPrefix + c; it is never a name a site can choose, because site
// user names may not start with the prefix.
const AnonymousPrefix = "~"

// AnonymousUser returns the user key of a connection before login.
func AnonymousUser(conn string) string { return AnonymousPrefix + conn }

// KindConnTaken is the kind of the error refusing a new connection the site
// named after a connection that exists (protocol.Error.kind): the front
// answers 409 and sets no cookie.
const KindConnTaken = "conn_taken"
