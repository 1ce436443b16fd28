package bundle

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestValidate breaks a valid manifest one field at a time: each break is
// reported with ErrInvalidManifest and names the field.
func TestValidate(t *testing.T) {
	good := manifestOf(smallFiles)
	if err := good.Validate(); err != nil {
		t.Fatalf("valid manifest: %v", err)
	}
	tests := []struct {
		name string
		edit func(m *Manifest)
		says string
	}{
		{"format", func(m *Manifest) { m.Format = 2 }, "format 2 is not supported"},
		{"empty name", func(m *Manifest) { m.Name = "" }, `name ""`},
		{"name with capitals", func(m *Manifest) { m.Name = "My App" }, `name "My App"`},
		{"name starting with a dot", func(m *Manifest) { m.Name = ".." }, `name ".."`},
		{"empty version", func(m *Manifest) { m.Version = "" }, `version ""`},
		{"version with a space", func(m *Manifest) { m.Version = "1.0 beta" }, `version "1.0 beta"`},
		{"no runtime", func(m *Manifest) { m.Runtime = "" }, "runtime is empty"},
		{"python3 without its block", func(m *Manifest) { m.Runtime = RuntimePython3 }, `python: missing`},
		{"unknown runtime", func(m *Manifest) { m.Runtime = "jvm" }, `runtime "jvm" is unknown`},
		{"NUL in args", func(m *Manifest) { m.Args = []string{"a\x00b"} }, "args[0]"},
		{"no sources", func(m *Manifest) { m.Sources = nil }, "sources: none"},
		{"short commit", func(m *Manifest) { m.Sources[1].Commit = "89e6c98" }, "sources[1]: commit \"89e6c98\" is abbreviated"},
		{"branch as commit", func(m *Manifest) { m.Sources[0].Commit = "main" }, `commit "main" is not a commit id`},
		{"upper-case commit", func(m *Manifest) { m.Sources[0].Commit = strings.ToUpper(m.Sources[0].Commit) }, "must be lowercase"},
		{"password in repo", func(m *Manifest) { m.Sources[0].Repo = "https://bob:hunter2@git.example.com/a.git" }, "carries a password"},
		{"source path escapes", func(m *Manifest) { m.Sources[1].Path = "../other" }, "path escapes"},
		{"toolchain without go", func(m *Manifest) { delete(m.Toolchain, "go") }, `toolchain: "go" missing`},
		{"no files", func(m *Manifest) { m.Files = nil }, "files: none"},
		{"unsorted files", func(m *Manifest) { m.Files[0], m.Files[1] = m.Files[1], m.Files[0] }, "not sorted"},
		{"file listed twice", func(m *Manifest) { m.Files[1] = m.Files[0] }, "listed twice"},
		{"file path escapes", func(m *Manifest) { m.Files[1].Path = "../etc/passwd" }, "path escapes the bundle"},
		{"absolute file path", func(m *Manifest) { m.Files[1].Path = "/etc/passwd" }, "absolute path"},
		{"manifest.json as a file", func(m *Manifest) { m.Files[1].Path = ManifestName }, "reserved for the manifest"},
		{"file and directory", func(m *Manifest) { m.Files[1].Path = "bin/app/x" }, "bin/app is listed as a file"},
		{"bad sha256", func(m *Manifest) { m.Files[0].SHA256 = "abc" }, "sha256 \"abc\""},
		{"bad mode", func(m *Manifest) { m.Files[1].Mode = 0o4755 }, "mode 4755"},
		{"negative size", func(m *Manifest) { m.Files[1].Size = -1 }, "negative size"},
		{"no entry", func(m *Manifest) { m.Entry = "" }, "entry is empty"},
		{"entry not listed", func(m *Manifest) { m.Entry = "bin/nope" }, `entry "bin/nope" is not a listed file`},
		{"entry not executable", func(m *Manifest) { m.Entry = "share/greeting.txt" }, "must be executable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := manifestOf(smallFiles)
			m.Sources = append([]Source(nil), m.Sources...)
			tc.edit(&m)
			wantErr(t, m.Validate(), ErrInvalidManifest, tc.says)
		})
	}
}

// TestManifestJSON checks the manifest's wire form: snake_case fields, modes
// as octal strings, and a round trip.
func TestManifestJSON(t *testing.T) {
	m := manifestOf(smallFiles)
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"mode": "0755"`, `"mode": "0644"`, `"sha256": "`, `"toolchain": {`, `"path": "go/ui"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("manifest JSON lacks %s:\n%s", want, b)
		}
	}
	back, err := decodeManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := back.encode()
	if string(again) != string(b) {
		t.Fatalf("round trip changed the manifest:\n%s\n%s", b, again)
	}
	var fm FileMode
	if err := json.Unmarshal([]byte(`"rwx"`), &fm); err == nil {
		t.Fatal("mode \"rwx\" accepted")
	}
}

// TestParseSource parses the forms `-source` takes and refuses the rest.
func TestParseSource(t *testing.T) {
	const c40 = "3f786850e387550fdab836ed7e6dc881de23001b"
	c64 := strings.Repeat("ab", 32)
	ok := []struct {
		in   string
		want Source
	}{
		{"https://git.example.com/acme/app.git@" + c40, Source{Repo: "https://git.example.com/acme/app.git", Commit: c40}},
		{"https://git.example.com/acme/app.git@" + c40 + ":services/api", Source{Repo: "https://git.example.com/acme/app.git", Commit: c40, Path: "services/api"}},
		{"git@git.example.com:acme/app.git@" + c40 + ":go/", Source{Repo: "git@git.example.com:acme/app.git", Commit: c40, Path: "go"}},
		{"ssh://git@git.example.com/acme/app.git@" + strings.ToUpper(c64), Source{Repo: "ssh://git@git.example.com/acme/app.git", Commit: c64}},
	}
	for _, tc := range ok {
		got, err := ParseSource(tc.in)
		if err != nil {
			t.Errorf("ParseSource(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseSource(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if again, err := ParseSource(got.String()); err != nil || again != got {
			t.Errorf("ParseSource(%q.String()) = %+v, %v", tc.in, again, err)
		}
	}
	bad := []struct{ in, says string }{
		{"https://git.example.com/acme/app.git", "missing @COMMIT"},
		{"https://git.example.com/acme/app.git@3f78685", "abbreviated (7 hex digits)"},
		{"https://git.example.com/acme/app.git@main", `commit "main" is not a commit id`},
		{"https://git.example.com/acme/app.git@v1.2.0:go", `commit "v1.2.0" is not a commit id`},
		{"@" + c40, "repo is empty"},
		{"https://git.example.com/acme/app.git@" + c40 + ":", "empty path after the commit"},
		{"https://git.example.com/acme/app.git@" + c40 + ":../x", "path escapes"},
		{"https://git.example.com/acme/app.git@" + c40 + ":/abs", "absolute path"},
		{"https://bob:s3cret@git.example.com/acme/app.git@" + c40, "carries a password"},
		{"my repo@" + c40, "contains spaces"},
	}
	for _, tc := range bad {
		_, err := ParseSource(tc.in)
		wantErr(t, err, nil, tc.says)
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error repeats the password: %v", err)
		}
	}
}

// TestParseDigest accepts both full forms and refuses the rest clearly.
func TestParseDigest(t *testing.T) {
	h := strings.Repeat("0f", 32)
	for _, in := range []string{"sha256:" + h, h, strings.ToUpper(h)} {
		got, err := ParseDigest(in)
		if err != nil || got != "sha256:"+h {
			t.Errorf("ParseDigest(%q) = %q, %v", in, got, err)
		}
	}
	for in, says := range map[string]string{
		"":                       "empty",
		"sha256:" + h[:12]:       "abbreviated (12 hex digits)",
		h[:7]:                    "abbreviated",
		"md5:" + h[:32]:          "only sha256 is supported",
		"sha256:" + h + "00":     "want sha256:<64 hex digits>",
		"sha256:" + h[:63] + "z": "want sha256:<64 hex digits>",
	} {
		_, err := ParseDigest(in)
		wantErr(t, err, ErrBadDigest, says)
	}
	if name, err := FileName("sha256:" + h); err != nil || name != h+".tar.gz" {
		t.Errorf("FileName = %q, %v", name, err)
	}
}

// TestSourceFromGit reads a real git checkout made here: origin (with the
// password dropped), HEAD, the sub-directory; a dirty tree is refused unless
// allowed, and then marked.
func TestSourceFromGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git not installed")
	}
	t.Setenv("GIT_CONFIG_GLOBAL", os.DevNull)
	t.Setenv("GIT_CONFIG_NOSYSTEM", "1")
	repo := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=Test", "-c", "user.email=test@example.com"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q")
	if err := os.MkdirAll(filepath.Join(repo, "svc", "api"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "svc", "api", "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	if _, err := SourceFromGit(repo, false); err == nil || !strings.Contains(err.Error(), "no commit yet") {
		t.Fatalf("checkout without commits: %v", err)
	}
	git("add", ".")
	git("commit", "-q", "-m", "first")
	head := git("rev-parse", "HEAD")
	if _, err := SourceFromGit(repo, false); err == nil || !strings.Contains(err.Error(), "origin remote") {
		t.Fatalf("checkout without origin: %v", err)
	}
	git("remote", "add", "origin", "https://ci:t0ken@git.example.com/acme/app.git")

	src, err := SourceFromGit(filepath.Join(repo, "svc", "api"), false)
	if err != nil {
		t.Fatal(err)
	}
	want := Source{Repo: "https://ci@git.example.com/acme/app.git", Commit: head, Path: "svc/api"}
	if src != want {
		t.Fatalf("SourceFromGit = %+v, want %+v", src, want)
	}

	if err := os.WriteFile(filepath.Join(repo, "svc", "api", "new.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = SourceFromGit(repo, false)
	wantErr(t, err, nil, "uncommitted changes", "svc/")
	src, err = SourceFromGit(repo, true)
	if err != nil || !src.Dirty || src.Path != "" || src.Commit != head {
		t.Fatalf("dirty tree allowed: %+v, %v", src, err)
	}

	_, err = SourceFromGit(t.TempDir(), false)
	wantErr(t, err, nil, "reading git checkout")
	if errors.Is(err, ErrInvalidManifest) {
		t.Fatal("a git failure is not a manifest problem")
	}
}
