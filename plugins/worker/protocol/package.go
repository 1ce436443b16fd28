package protocol

import "google.golang.org/protobuf/encoding/protowire"

// PackageBase returns the base_digest of an encoded UserPackage: the
// precopy the package continues, which waking it needs too (empty for a
// package complete in itself, or bytes that are not a package). It reads
// only the message's top-level fields, skipping the connections whole, so
// it costs next to nothing whatever the package's size.
func PackageBase(b []byte) string { return packageField(b, 7) } // UserPackage.base_digest

// PackageUser returns the person an encoded UserPackage belongs to (its
// user field), read the same way: "" for bytes that are not a package.
func PackageUser(b []byte) string { return packageField(b, 2) } // UserPackage.user

// packageField is the top-level bytes field num of an encoded message.
func packageField(b []byte, num protowire.Number) string {
	for len(b) > 0 {
		n, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			return ""
		}
		b = b[l:]
		if n == num && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ""
			}
			return string(v)
		}
		m := protowire.ConsumeFieldValue(n, typ, b)
		if m < 0 {
			return ""
		}
		b = b[m:]
	}
	return ""
}
