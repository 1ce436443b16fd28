package cluster

import (
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
// ("" names nobody).
type authenticator struct {
	static map[string]string // key → name
	maps   *fsm.FSM
}

func newAuthenticator(apiKeys map[string]string, maps *fsm.FSM) *authenticator {
	a := &authenticator{static: map[string]string{}, maps: maps}
	for name, key := range apiKeys {
		a.static[key] = name
	}
	return a
}

// name authenticates an Authorization header's value.
func (a *authenticator) name(auth string) (string, error) {
	if len(a.static) == 0 && !a.maps.GatewayHasAPIKeys() {
		return "", nil
	}
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || tok == "" {
		return "", errKeyRequired
	}
	for key, n := range a.static {
		if subtle.ConstantTimeCompare([]byte(key), []byte(tok)) == 1 {
			return n, nil
		}
	}
	if k, ok := a.maps.GatewayAPIKeyByHash(hashKey(tok)); ok {
		return k.Name, nil
	}
	return "", errKeyUnknown
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
