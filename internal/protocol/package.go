package protocol

import "google.golang.org/protobuf/encoding/protowire"

// PackageBase returns the base_digest of an encoded UserPackage: the
// precopy the package continues, which waking it needs too (empty for a
// package complete in itself, or bytes that are not a package). It reads
// only the message's top-level fields, skipping the connections whole, so
// it costs next to nothing whatever the package's size.
func PackageBase(b []byte) string {
	const field = 7 // UserPackage.base_digest
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return ""
		}
		b = b[n:]
		if num == field && typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return ""
			}
			return string(v)
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return ""
		}
		b = b[m:]
	}
	return ""
}
