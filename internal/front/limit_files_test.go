package front

import "testing"

// The front's connection bound: as configured, or the file limit less
// what the process keeps for itself.
func TestFrontConnectionsBound(t *testing.T) {
	if n, _ := Connections(500); n != 500 {
		t.Fatalf("configured 500, got %d", n)
	}
	n, files := Connections(0)
	if files == 0 {
		t.Skip("no file limit to derive from on this system")
	}
	reserve := min(max(files/5, 256), 10000)
	if uint64(n) != files-reserve {
		t.Fatalf("file limit %d: bound %d, want %d", files, n, files-reserve)
	}
}
