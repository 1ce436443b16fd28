package agent

import "testing"

func TestDiskReserve(t *testing.T) {
	for _, c := range []struct{ total, want uint64 }{
		{30 << 20, 3 << 20},   // a small tmpfs: a tenth
		{4 << 20, 1 << 20},    // never under 1 MiB
		{500 << 30, 64 << 20}, // a big disk: 64 MiB
	} {
		if got := reserve(c.total); got != c.want {
			t.Errorf("reserve(%d) = %d, want %d", c.total, got, c.want)
		}
	}
}
