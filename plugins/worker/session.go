package worker

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"

	"github.com/stickyd/stickyd/plugins/worker/protocol"
)

// Session is one connection of a person: a browser with its cookie. The site
// names it while serving its first request (NameConnection); if the site does
// not, the SDK names it with 128 random bits. Login declares who the person
// is: every connection of that person then lives on one worker.
type Session struct {
	rt     *runtime
	ctx    context.Context // the handlers' context, made once (context)
	name   string
	user   string // "" while anonymous
	login  string // declared during the current frame
	attrs  map[string]string
	isNew  bool
	keep   bool        // the first request touched the session: see Keep
	forget atomic.Bool // Forget was called during the current frame
	values *Tree
	pages  map[string]*Page
	// acct is the account of the user the current frame belongs to.
	acct *account
	// ck is the mark of the connection's last checkpoint piece and ckDirty
	// says its values changed since (checkpoint.go).
	ck      ckMark
	ckDirty atomic.Bool
}

// newSession returns a connection of rt whose values changes are noted for
// the next checkpoint.
func newSession(rt *runtime, name, user string) *Session {
	s := &Session{rt: rt, name: name, user: user, pages: map[string]*Page{}}
	s.values = newTree(nil)
	s.values.touch = s.changed
	return s
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,128}$`)

var (
	// ErrNamed is returned by NameConnection outside a connection's first request.
	ErrNamed = errors.New("connection is already named")
	// ErrBadName is returned for a connection or user name stickyd cannot carry.
	ErrBadName = errors.New("bad name: use 1-128 of A-Z a-z 0-9 . _ @ - (users may not start with ~)")
)

type sessionKey struct{}

// SessionFrom returns the connection a request or message belongs to, or nil
// outside stickyd.
func SessionFrom(ctx context.Context) *Session {
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

// Conn is the connection's name. On the first request it is a random name
// until the site calls NameConnection.
func (s *Session) Conn() string { return s.name }

// IsNew reports whether this is the connection's first request.
func (s *Session) IsNew() bool { return s.isNew }

// NameConnection names a new connection. It may be called only while serving
// the connection's first request.
func (s *Session) NameConnection(name string) error {
	if !s.isNew {
		return ErrNamed
	}
	if !nameRE.MatchString(name) {
		return fmt.Errorf("naming connection %q: %w", name, ErrBadName)
	}
	s.name = name
	s.keep = true
	return nil
}

// Keep says the connection of this first request is a visitor's even if
// the request is one that names nobody by default (a HEAD, a GET of a
// static asset or answered with an error, whose handler did not touch the
// session; see leavesNoTrace): the answer sets the cookie and the
// connection is recorded.
func (s *Session) Keep() { s.keep = true }

// User is who the person is, or "" before Login.
func (s *Session) User() string {
	if s.login != "" {
		return s.login
	}
	return s.user
}

// Login declares who the person is. From the next frame on, all their
// connections live on one worker; this connection's pages stay with it when
// this worker becomes the person's home, and restart clean otherwise.
func (s *Session) Login(user string) error {
	return s.LoginWith(user, nil)
}

var attrKeyRE = regexp.MustCompile(`^[a-z][a-z0-9_.-]{0,63}$`)

// ErrBadAttribute is returned for attributes stickyd cannot carry.
var ErrBadAttribute = errors.New("bad attribute: at most 16, keys of 1-64 of a-z 0-9 _ . - starting with a letter, values of at most 256 bytes")

// LoginWith is Login with attributes of the person (customer, department,
// plan...): the operator's assignment rules match them to send people to a
// group (a canary, a customer's own release). They are recorded with the
// person at each login.
func (s *Session) LoginWith(user string, attrs map[string]string) error {
	if !nameRE.MatchString(user) || strings.HasPrefix(user, protocol.AnonymousPrefix) {
		return fmt.Errorf("logging in %q: %w", user, ErrBadName)
	}
	if len(attrs) > 16 {
		return fmt.Errorf("logging in %q: %w", user, ErrBadAttribute)
	}
	for k, v := range attrs {
		if !attrKeyRE.MatchString(k) || len(v) > 256 {
			return fmt.Errorf("logging in %q: attribute %q: %w", user, k, ErrBadAttribute)
		}
	}
	s.login = user
	s.attrs = attrs
	return nil
}

// Forget forgets the person this connection belongs to, everywhere, once
// the current request is answered: all their connections, their pages'
// state, their parked package and their place in the maps (as `stickyd user
// forget` does). Call it at logout. The browser's next request is a
// newcomer's, with a new connection.
func (s *Session) Forget() { s.forget.Store(true) }

func (s *Session) userKey() string {
	if s.user != "" {
		return s.user
	}
	return protocol.AnonymousUser(s.name)
}

// WorkerID names the worker holding this connection now.
func (s *Session) WorkerID() string { return s.rt.workerID }

// Values is the connection's own data, kept beside its pages (no deltas).
func (s *Session) Values() *Tree { return s.values }

func randomName() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// context is the context the session's handlers run with: the runtime's,
// carrying the session. It is made once, in the person's mailbox, not
// once a frame.
func (s *Session) context() context.Context {
	if s.ctx == nil {
		s.ctx = context.WithValue(s.rt.ctx, sessionKey{}, s)
	}
	return s.ctx
}
