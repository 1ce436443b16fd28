package bundle

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// TestVerifyPacked checks that what Pack writes verifies, under both digest
// forms, and that a malformed digest is refused before reading.
func TestVerifyPacked(t *testing.T) {
	archive, digest := packApp(t)
	for _, d := range []string{digest, digest[len(DigestPrefix):]} {
		m, err := Verify(bytes.NewReader(archive), d)
		if err != nil {
			t.Fatalf("Verify(%s): %v", d, err)
		}
		if m.Name != "demo" || m.Entry != "bin/app" || len(m.Sources) != 2 {
			t.Fatalf("manifest %+v", m)
		}
	}
	for _, d := range []string{"", digest[:20], "md5:" + digest[7:], digest + "0", "sha256:" + string(bytes.Repeat([]byte("g"), 64))} {
		if _, err := Verify(bytes.NewReader(archive), d); !errors.Is(err, ErrBadDigest) {
			t.Errorf("Verify with digest %q: %v, want ErrBadDigest", d, err)
		}
	}
}

// TestVerifyTampered feeds Verify archives that are not the bundle they
// claim to be. All but the first hash to the digest given (they are crafted
// with archive/tar directly), so only the content checks can catch them.
// Each is refused with ErrTampered (or ErrInvalidManifest) and a message
// naming what is wrong.
func TestVerifyTampered(t *testing.T) {
	good := smallFiles
	withManifest := func(m Manifest, entries ...tarEntry) []tarEntry {
		return append([]tarEntry{manifestEntry(t, m)}, entries...)
	}
	notListed := manifestOf(good)
	notListed.Entry = "bin/nope"
	absolute := manifestOf(good)
	absolute.Files = append([]File{{Path: "/etc/passwd", Size: 1, SHA256: hexSum("x"), Mode: ModePlain}}, absolute.Files...)

	tests := []struct {
		name    string
		entries []tarEntry
		tail    string
		kind    error
		says    []string
	}{
		{
			name:    "file differs from the manifest",
			entries: withManifest(manifestOf(good), good[0], reg("share/greeting.txt", "HELLO\n", 0o644)),
			kind:    ErrTampered,
			says:    []string{"file share/greeting.txt: sha256 mismatch (manifest " + hexSum("hello\n")[:12] + "…, archive " + hexSum("HELLO\n")[:12] + "…)"},
		},
		{
			name:    "size differs",
			entries: withManifest(manifestOf(good), good[0], reg("share/greeting.txt", "hello!\n", 0o644)),
			kind:    ErrTampered,
			says:    []string{"file share/greeting.txt: size mismatch (manifest 6, archive 7 bytes)"},
		},
		{
			name:    "mode differs",
			entries: withManifest(manifestOf(good), reg("bin/app", good[0].body, 0o644), good[1]),
			kind:    ErrTampered,
			says:    []string{"file bin/app: mode mismatch (manifest 0755, archive 0644)"},
		},
		{
			name:    "setuid bit",
			entries: withManifest(manifestOf(good), reg("bin/app", good[0].body, 0o4755), good[1]),
			kind:    ErrTampered,
			says:    []string{"file bin/app: mode mismatch (manifest 0755, archive 4755)"},
		},
		{
			name:    "extra file",
			entries: withManifest(manifestOf(good), good[0], good[1], reg("extra.txt", "surprise\n", 0o644)),
			kind:    ErrTampered,
			says:    []string{"file extra.txt: in the archive but not in the manifest"},
		},
		{
			name:    "missing file",
			entries: withManifest(manifestOf(good), good[0]),
			kind:    ErrTampered,
			says:    []string{"file share/greeting.txt: in the manifest but missing from the archive"},
		},
		{
			name:    "path traversal",
			entries: withManifest(manifestOf(good), good[0], good[1], reg("../x", "x", 0o644)),
			kind:    ErrTampered,
			says:    []string{`entry "../x": path escapes the bundle`},
		},
		{
			name:    "nested path traversal",
			entries: withManifest(manifestOf(good), good[0], good[1], reg("bin/../../x", "x", 0o644)),
			kind:    ErrTampered,
			says:    []string{`entry "bin/../../x": path escapes the bundle`},
		},
		{
			name:    "absolute path",
			entries: withManifest(manifestOf(good), good[0], good[1], reg("/etc/cron.d/x", "x", 0o644)),
			kind:    ErrTampered,
			says:    []string{`entry "/etc/cron.d/x": absolute path`},
		},
		{
			name:    "unclean path",
			entries: withManifest(manifestOf(good), reg("./bin/app", good[0].body, 0o755), good[1]),
			kind:    ErrTampered,
			says:    []string{`entry "./bin/app": path is not clean (want "bin/app")`},
		},
		{
			name:    "duplicate name",
			entries: withManifest(manifestOf(good), good[0], good[1], good[0]),
			kind:    ErrTampered,
			says:    []string{`entry "bin/app": appears twice`},
		},
		{
			name:    "manifest twice",
			entries: withManifest(manifestOf(good), good[0], manifestEntry(t, manifestOf(good)), good[1]),
			kind:    ErrTampered,
			says:    []string{`entry "manifest.json": appears twice`},
		},
		{
			name:    "symlink",
			entries: withManifest(manifestOf(good), good[0], good[1], tarEntry{name: "lib/passwd", typ: tar.TypeSymlink, link: "/etc/passwd"}),
			kind:    ErrTampered,
			says:    []string{`entry "lib/passwd": symlink (to "/etc/passwd"): bundles hold only regular files`},
		},
		{
			name:    "symlink in place of a listed file",
			entries: withManifest(manifestOf(good), tarEntry{name: "bin/app", typ: tar.TypeSymlink, link: "/bin/sh"}, good[1]),
			kind:    ErrTampered,
			says:    []string{`entry "bin/app": symlink (to "/bin/sh")`},
		},
		{
			name:    "hard link",
			entries: withManifest(manifestOf(good), good[0], good[1], tarEntry{name: "lib/sh", typ: tar.TypeLink, link: "bin/app"}),
			kind:    ErrTampered,
			says:    []string{`entry "lib/sh": hard link (to "bin/app")`},
		},
		{
			name:    "device",
			entries: withManifest(manifestOf(good), good[0], good[1], tarEntry{name: "dev/mem", typ: tar.TypeChar}),
			kind:    ErrTampered,
			says:    []string{`entry "dev/mem": device`},
		},
		{
			name:    "directory entry",
			entries: withManifest(manifestOf(good), tarEntry{name: "bin/", typ: tar.TypeDir, mode: 0o755}, good[0], good[1]),
			kind:    ErrTampered,
			says:    []string{`entry "bin/": directory entry`},
		},
		{
			name:    "manifest not first",
			entries: append([]tarEntry{good[0], manifestEntry(t, manifestOf(good))}, good[1]),
			kind:    ErrTampered,
			says:    []string{`first entry is "bin/app", want manifest.json`},
		},
		{
			name:    "empty archive",
			entries: nil,
			kind:    ErrTampered,
			says:    []string{"the archive is empty (want manifest.json first)"},
		},
		{
			name:    "entry not a listed file",
			entries: withManifest(notListed, good...),
			kind:    ErrInvalidManifest,
			says:    []string{`manifest.json: invalid manifest: entry "bin/nope" is not a listed file`},
		},
		{
			name:    "manifest listing an absolute path",
			entries: withManifest(absolute, good...),
			kind:    ErrInvalidManifest,
			says:    []string{`files[0] "/etc/passwd": absolute path`},
		},
		{
			name:    "manifest not JSON",
			entries: append([]tarEntry{reg(ManifestName, "name = demo", 0o644)}, good...),
			kind:    ErrInvalidManifest,
			says:    []string{"manifest.json: invalid manifest: decoding JSON"},
		},
		{
			name:    "manifest with an unknown field",
			entries: append([]tarEntry{reg(ManifestName, `{"format": 1, "hooks": ["curl evil"]}`, 0o644)}, good...),
			kind:    ErrInvalidManifest,
			says:    []string{`unknown field "hooks"`},
		},
		{
			name:    "data after the gzip stream",
			entries: withManifest(manifestOf(good), good...),
			tail:    "more",
			kind:    ErrTampered,
			says:    []string{"data after the end of the gzip stream"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			archive := craft(t, tc.entries, tc.tail)
			digest := digestOf(archive) // right: only the content is wrong
			_, err := Verify(bytes.NewReader(archive), digest)
			wantErr(t, err, tc.kind, append([]string{"bundle " + digest + ": "}, tc.says...)...)
		})
	}

	// Data hidden inside the gzip stream after the tar's end.
	hidden := craftInner(t, withManifest(manifestOf(good), good...), "#!/bin/sh\nrm -rf /\n", "")
	_, err := Verify(bytes.NewReader(hidden), digestOf(hidden))
	wantErr(t, err, ErrTampered, "data after the end of the tar archive")
	// Zero padding there, as other tar writers leave, is fine.
	padded := craftInner(t, withManifest(manifestOf(good), good...), string(make([]byte, 8192)), "")
	if _, err := Verify(bytes.NewReader(padded), digestOf(padded)); err != nil {
		t.Fatalf("zero padding after the tar: %v", err)
	}

	// The crafting itself is sound: the same entries, untouched, verify.
	archive := craft(t, withManifest(manifestOf(good), good...), "")
	if _, err := Verify(bytes.NewReader(archive), digestOf(archive)); err != nil {
		t.Fatalf("a well-crafted archive: %v", err)
	}
}

// TestVerifyDigestMismatch flips one byte, cuts the end off, or appends one
// to a packed archive: the bytes no longer hash to the digest, and that is
// the error reported, whatever else the change broke.
func TestVerifyDigestMismatch(t *testing.T) {
	archive, digest := packApp(t)
	flipped := bytes.Clone(archive)
	flipped[len(flipped)/2] ^= 0x01
	for name, b := range map[string][]byte{
		"flipped byte":  flipped,
		"truncated":     archive[:len(archive)-10],
		"appended byte": append(bytes.Clone(archive), 0),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Verify(bytes.NewReader(b), digest)
			wantErr(t, err, ErrTampered, "bundle "+digest+": the archive hashes to "+digestOf(b)+" instead")
		})
	}
	// A large archive with an early content error and a changed last byte:
	// the digest covers every byte, so the mismatch is still what is said.
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i*7919 + i>>8) // poorly compressible
	}
	early := craft(t, []tarEntry{manifestEntry(t, manifestOf(smallFiles)), reg("extra.txt", "x", 0o644), reg("big.bin", string(big), 0o644)}, "")
	changed := bytes.Clone(early)
	changed[len(changed)-1] ^= 0xff
	_, err := Verify(bytes.NewReader(changed), digestOf(early))
	wantErr(t, err, ErrTampered, "hashes to "+digestOf(changed))

	// Someone else's valid bundle under this digest is refused too.
	other := craft(t, append([]tarEntry{manifestEntry(t, manifestOf(smallFiles))}, smallFiles...), "")
	_, err = Verify(bytes.NewReader(other), digest)
	wantErr(t, err, ErrTampered, "hashes to "+digestOf(other))
}

// TestVerifyReadError checks that a failing reader is reported as such, not
// as tampering.
func TestVerifyReadError(t *testing.T) {
	archive, digest := packApp(t)
	boom := errors.New("disk on fire")
	r := io.MultiReader(bytes.NewReader(archive[:100]), iotest.ErrReader(boom))
	_, err := Verify(r, digest)
	if !errors.Is(err, boom) || errors.Is(err, ErrTampered) {
		t.Fatalf("got %v, want the read error and not ErrTampered", err)
	}
}

// FuzzVerify feeds Verify arbitrary bytes, under their own digest: it must
// return, never panic or hang, and accept only what a second Verify accepts.
func FuzzVerify(f *testing.F) {
	archive, _ := func() ([]byte, string) {
		var buf bytes.Buffer
		d, err := Pack("testdata/app", demoManifest(), &buf)
		if err != nil {
			f.Fatal(err)
		}
		return buf.Bytes(), d
	}()
	f.Add(archive)
	f.Add([]byte{})
	f.Add([]byte("\x1f\x8b"))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Verify(bytes.NewReader(b), digestOf(b))
		if err != nil {
			return
		}
		if verr := m.Validate(); verr != nil {
			t.Fatalf("Verify accepted a manifest that does not validate: %v", verr)
		}
	})
}
