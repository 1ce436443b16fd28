package front

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// signer signs connection names into cookie values: name "." MAC. A value
// whose MAC does not match was tampered with or forged and names nobody.
type signer struct{ key []byte }

func newSigner(key []byte) *signer { return &signer{key: append([]byte(nil), key...)} }

func (s *signer) mac(name string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("stickyd-conn:"))
	m.Write([]byte(name))
	return m.Sum(nil)
}

func (s *signer) sign(name string) string {
	return name + "." + base64.RawURLEncoding.EncodeToString(s.mac(name))
}

func (s *signer) verify(value string) (string, bool) {
	i := strings.LastIndexByte(value, '.')
	if i <= 0 {
		return "", false
	}
	name, sig := value[:i], value[i+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return "", false
	}
	if !hmac.Equal(got, s.mac(name)) {
		return "", false
	}
	return name, true
}
