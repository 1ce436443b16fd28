package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/stickyd/stickyd/internal/fsm"
	"github.com/stickyd/stickyd/internal/gateway"
)

// API keys (docs/gateway.md, "Keys and tenants"): the configuration's
// api_keys (the static way, to bootstrap) and the keys created through
// the admin API, held in the maps as their SHA-256. A key is random
// (32 bytes): a plain hash is enough, no key stretching, and a lookup
// costs one hash.

// keyPrefix starts every created key, so that one found in a log or a
// repository is known for what it is.
const keyPrefix = "sk-stickyd-"

// newSecret makes a new key; hashKey is what the maps hold of it.
func newSecret() string {
	var b [32]byte
	_, _ = randRead(b[:])
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
}

func hashKey(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// Errors of authentication: the caller reads them.
var (
	errKeyRequired = errors.New("an API key is required: Authorization: Bearer <key> (or x-api-key: <key>)")
	errKeyUnknown  = errors.New("the API key is not known")
)

// authenticator names the caller of a bearer token: a static key's name
// (api_keys, compared in constant time) or a created key's (found by its
// hash in the replica). With no key of either kind, the gateway is open
// ("" names nobody). A token of stickyd's own format this replica does
// not know is looked up again once it has caught up with the leader
// (catchUp, nil: never): it may be a key created a moment ago.
type authenticator struct {
	static  map[string]string // key → name
	maps    *fsm.FSM
	catchUp *catchUp
}

func newAuthenticator(apiKeys map[string]string, maps *fsm.FSM, c *catchUp) *authenticator {
	a := &authenticator{static: map[string]string{}, maps: maps, catchUp: c}
	for name, key := range apiKeys {
		a.static[key] = name
	}
	return a
}

// name authenticates an Authorization header's value.
func (a *authenticator) name(ctx context.Context, auth string) (string, error) {
	n, fresh, err := a.lookup(auth)
	if fresh && a.catchUp != nil && a.catchUp.wait(ctx) == nil {
		n, _, err = a.lookup(auth)
	}
	return n, err
}

// lookup is name on this replica as it stands; fresh reports a token of
// stickyd's format it knows nothing of (unknown, or taken as keyless
// because no key has reached this replica yet).
func (a *authenticator) lookup(auth string) (n string, fresh bool, err error) {
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	created := ok && strings.HasPrefix(tok, keyPrefix)
	if len(a.static) == 0 && !a.maps.GatewayHasAPIKeys() {
		return "", created, nil
	}
	if !ok || tok == "" {
		return "", false, errKeyRequired
	}
	for key, n := range a.static {
		if subtle.ConstantTimeCompare([]byte(key), []byte(tok)) == 1 {
			return n, false, nil
		}
	}
	if k, ok := a.maps.GatewayAPIKeyByHash(hashKey(tok)); ok {
		return k.Name, false, nil
	}
	return "", created, errKeyUnknown
}

// accessOf is the router's Config.Access: a created key's allowance and
// its tenant's, from the replica (the leader's: calls run there).
func accessOf(maps *fsm.FSM) func(string) (gateway.Access, bool) {
	return func(name string) (gateway.Access, bool) {
		k, t, ok := maps.GatewayAccess(name)
		if !ok {
			return gateway.Access{}, false
		}
		return gateway.Access{Tenant: k.Tenant, KeyAllowance: k.Allowance, TenantAllowance: t.Allowance}, true
	}
}
