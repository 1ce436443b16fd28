package monitor

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/placement"
)

// People are listed a page at a time, never all at once: with a million
// people one answer would weigh hundreds of megabytes and hold the maps'
// lock for seconds. GET /v1/users, GET /v1/monitor and the monitor page's
// api/view take the same parameters, parsed here:
//
//	worker=W   the people homed on worker W
//	group=G    the people homed on a worker of group G
//	state=S    the people in state S (live, moving, parked)
//	cursor=C   the page after the one whose answer carried next=C
//	limit=N    the page's size, 1..MaxLimit (default DefaultLimit)

const (
	// DefaultLimit is a page's size when the query names none.
	DefaultLimit = 100
	// MaxLimit is the largest page a query may ask for.
	MaxLimit = fsm.MaxPageLimit
)

// cursorVersion leads every cursor, so that its form may change and an old
// one be told apart.
const cursorVersion = "1:"

// ErrBadQuery is wrapped by every error ParseQuery returns: the caller
// answers it with 400 and the error's message.
var ErrBadQuery = errors.New("bad people query")

// ParseQuery reads a page query from URL parameters. An unknown state, a
// limit outside 1..MaxLimit or a cursor no answer gave is an error wrapping
// ErrBadQuery, whose message says what is wrong.
func ParseQuery(v url.Values) (fsm.UserQuery, error) {
	q := fsm.UserQuery{Worker: v.Get("worker"), Group: v.Get("group"), State: v.Get("state"), Limit: DefaultLimit}
	switch q.State {
	case "", placement.StateLive, placement.StateMoving, placement.StateParked:
	default:
		return q, fmt.Errorf("%w: state %q: want live, moving or parked", ErrBadQuery, q.State)
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxLimit {
			return q, fmt.Errorf("%w: limit %q: want a number from 1 to %d", ErrBadQuery, s, MaxLimit)
		}
		q.Limit = n
	}
	if c := v.Get("cursor"); c != "" {
		after, err := DecodeCursor(c)
		if err != nil {
			return q, err
		}
		q.After = after
	}
	return q, nil
}

// EncodeCursor is the cursor of the page after the person named after (a
// page's last person, fsm.UserPage.Next); "" for none.
func EncodeCursor(after string) string {
	if after == "" {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString([]byte(cursorVersion + after))
}

// DecodeCursor reads a cursor EncodeCursor wrote; anything else is an
// error wrapping ErrBadQuery.
func DecodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	after, ok := strings.CutPrefix(string(b), cursorVersion)
	if err != nil || !ok || after == "" || !utf8.ValidString(after) {
		return "", fmt.Errorf("%w: cursor %q is not one a page gave (take \"next\" from the answer before)", ErrBadQuery, c)
	}
	return after, nil
}

// Page is one page of people as the API answers GET /v1/users: the people
// in name order and the cursor of the next page, empty after the last.
type Page struct {
	Users []placement.UserInfo `json:"users"`
	Next  string               `json:"next,omitempty"`
}

// PageOf turns the maps' page into the API's, its cursor encoded.
func PageOf(p fsm.UserPage) Page {
	users := p.Users
	if users == nil {
		users = []placement.UserInfo{}
	}
	return Page{Users: users, Next: EncodeCursor(p.Next)}
}

// PeopleOf turns a page of the maps into the view's people: each with the
// group of their worker (groupOf) and, when usage has them on the same
// worker, what they consumed there.
func PeopleOf(users []placement.UserInfo, groupOf func(worker string) string, usage map[string]Person) []Person {
	out := make([]Person, 0, len(users))
	for _, u := range users {
		p := Person{User: u.User, Worker: u.Worker, Group: groupOf(u.Worker), State: u.State, Conns: u.Conns, Seen: u.Seen,
			GatewayMicros: u.GatewayMicros, GatewayCalls: u.GatewayCalls}
		if x, ok := usage[u.User]; ok && x.Worker == u.Worker {
			p.Pages, p.BusySeconds, p.Frames, p.StateBytes = x.Pages, x.BusySeconds, x.Frames, x.StateBytes
		}
		out = append(out, p)
	}
	return out
}
