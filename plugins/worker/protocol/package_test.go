package protocol

import (
	"testing"

	"google.golang.org/protobuf/proto"
)

func TestPackageBase(t *testing.T) {
	for _, tc := range []struct {
		pkg  *UserPackage
		want string
	}{
		{&UserPackage{User: "ann", Conns: []*ConnPackage{{Name: "c", Values: make([]byte, 1<<20)}}}, ""},
		{&UserPackage{User: "ann", Conns: []*ConnPackage{{Name: "c", Pages: []*PagePackage{{Id: "p", FromBase: true}}}}, BaseDigest: "sha256:abc"}, "sha256:abc"},
	} {
		b, err := proto.Marshal(tc.pkg)
		if err != nil {
			t.Fatal(err)
		}
		if got := PackageBase(b); got != tc.want {
			t.Fatalf("PackageBase = %q, want %q", got, tc.want)
		}
	}
	if got := PackageBase([]byte{0xff, 0xff, 0xff}); got != "" {
		t.Fatalf("PackageBase of garbage = %q", got)
	}
}
