package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// DigestPrefix starts every digest: the algorithm, then a colon.
const DigestPrefix = "sha256:"

// ParseDigest accepts "sha256:<64 hex>" or the bare 64 hex digits and
// returns the canonical form, "sha256:" and lowercase hex. Abbreviated
// digests and other algorithms are refused with ErrBadDigest: a bundle is
// named by its full digest only.
func ParseDigest(s string) (string, error) {
	h, err := hexOf(s)
	if err != nil {
		return "", err
	}
	return DigestPrefix + h, nil
}

// DigestOf reads r to its end and returns the digest of its bytes. It says
// nothing of whether they form a valid bundle: Verify does.
func DigestOf(r io.Reader) (string, error) {
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		return "", fmt.Errorf("hashing bundle: %w", err)
	}
	return DigestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

// FileName is the name under which archives keep a bundle: "<hex>.tar.gz".
// The digest must be valid (see ParseDigest).
func FileName(digest string) (string, error) {
	h, err := hexOf(digest)
	if err != nil {
		return "", err
	}
	return h + ".tar.gz", nil
}

// hexOf returns the 64 lowercase hex digits of a digest given in either
// accepted form.
func hexOf(s string) (string, error) {
	h := strings.TrimPrefix(s, DigestPrefix)
	if len(h) != 2*sha256.Size || !isHex(h) {
		switch {
		case s == "":
			return "", fmt.Errorf("%w: empty (want sha256:<64 hex digits>)", ErrBadDigest)
		case strings.Contains(s, ":") && !strings.HasPrefix(s, DigestPrefix):
			return "", fmt.Errorf("%w: %q: only sha256 is supported (want sha256:<64 hex digits>)", ErrBadDigest, s)
		case isHex(h) && len(h) < 2*sha256.Size:
			return "", fmt.Errorf("%w: %q: abbreviated (%d hex digits); give all 64", ErrBadDigest, s, len(h))
		default:
			return "", fmt.Errorf("%w: %q (want sha256:<64 hex digits>)", ErrBadDigest, s)
		}
	}
	return strings.ToLower(h), nil
}

// isHex reports whether s is non-empty and only hex digits, either case.
func isHex(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// isLowerHex reports whether s is non-empty and only lowercase hex digits.
func isLowerHex(s string) bool {
	return isHex(s) && strings.ToLower(s) == s
}

// short abbreviates a hex sum for messages that compare two of them.
func short(h string) string {
	if len(h) > 12 {
		return h[:12] + "…"
	}
	return h
}
