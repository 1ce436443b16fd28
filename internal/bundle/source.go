package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"regexp"
	"strings"
	"time"
)

// Source is one repository a build came from, pinned to one commit.
type Source struct {
	// Repo is where the repository lives, as git knows it: a URL such as
	// https://git.example.com/acme/app.git, or an scp-like address such as
	// git@git.example.com:acme/app.git. It never carries a password.
	Repo string `json:"repo"`
	// Commit is the full commit id: 40 lowercase hex digits (SHA-1
	// repositories) or 64 (SHA-256). Branch names, tags and abbreviated
	// ids are refused: they do not pin a build.
	Commit string `json:"commit"`
	// Path is the sub-directory of the repository that was used, slash
	// separated and relative; empty means the whole repository.
	Path string `json:"path,omitempty"`
	// Dirty records that the checkout had uncommitted changes when the
	// bundle was made (SourceFromGit with allowDirty): Commit alone does not
	// reproduce it.
	Dirty bool `json:"dirty,omitempty"`
}

// String returns the source in the form ParseSource reads.
func (s Source) String() string {
	out := s.Repo + "@" + s.Commit
	if s.Path != "" {
		out += ":" + s.Path
	}
	return out
}

// ParseSource parses "REPO@COMMIT" or "REPO@COMMIT:PATH", as given to
// `stickyd bundle pack -source`. REPO may itself contain "@" (as in
// git@host:org/app.git): the commit is what follows the last "@" that is
// followed by a full commit id. The commit is lowercased; the result is
// validated like a manifest's sources.
func ParseSource(s string) (Source, error) {
	at := -1
	for i := strings.LastIndex(s, "@"); i >= 0; i = strings.LastIndex(s[:i], "@") {
		commit, _, _ := strings.Cut(s[i+1:], ":")
		if isCommit(strings.ToLower(commit)) {
			at = i
			break
		}
	}
	if at < 0 {
		i := strings.LastIndex(s, "@")
		if i < 0 {
			return Source{}, fmt.Errorf("source %q: missing @COMMIT (want REPO@COMMIT or REPO@COMMIT:PATH)", redact(s))
		}
		commit, _, _ := strings.Cut(s[i+1:], ":")
		return Source{}, fmt.Errorf("source %q: %s", redact(s), commitProblem(commit))
	}
	src := Source{Repo: s[:at]}
	rest := s[at+1:]
	commit, p, hasPath := strings.Cut(rest, ":")
	src.Commit = strings.ToLower(commit)
	if hasPath {
		src.Path = strings.TrimSuffix(p, "/")
		if src.Path == "" {
			return Source{}, fmt.Errorf("source %q: empty path after the commit (drop the colon for the whole repository)", redact(s))
		}
	}
	if err := src.validate(); err != nil {
		return Source{}, fmt.Errorf("source %q: %w", redact(s), err)
	}
	return src, nil
}

// gitTimeout bounds each git command SourceFromGit runs.
const gitTimeout = time.Minute

// SourceFromGit describes the local git checkout dir with the git CLI: the
// URL of its "origin" remote (with any password removed), its HEAD commit,
// and the sub-directory dir is in, if not the top. It refuses a checkout with
// uncommitted changes or untracked files (as `git status` shows them, so
// ignored files do not count) unless allowDirty, in which case the source
// is marked Dirty. Each git command is given one minute.
func SourceFromGit(dir string, allowDirty bool) (Source, error) {
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				msg := strings.TrimSpace(stderr.String())
				if msg == "" {
					msg = err.Error()
				}
				return "", fmt.Errorf("git %s: %s", strings.Join(args, " "), msg)
			}
			return "", fmt.Errorf("running git: %w", err)
		}
		return strings.TrimSpace(stdout.String()), nil
	}

	if _, err := git("rev-parse", "--git-dir"); err != nil {
		return Source{}, fmt.Errorf("reading git checkout %s: %w", dir, err)
	}
	commit, err := git("rev-parse", "--verify", "HEAD^{commit}")
	if err != nil {
		return Source{}, fmt.Errorf("reading HEAD of %s (no commit yet?): %w", dir, err)
	}
	repo, err := git("remote", "get-url", "origin")
	if err != nil {
		return Source{}, fmt.Errorf("reading the origin remote of %s (add one, or give -source REPO@COMMIT): %w", dir, err)
	}
	prefix, err := git("rev-parse", "--show-prefix")
	if err != nil {
		return Source{}, fmt.Errorf("reading the sub-directory of %s: %w", dir, err)
	}
	status, err := git("status", "--porcelain", "--untracked-files=normal")
	if err != nil {
		return Source{}, fmt.Errorf("reading the status of %s: %w", dir, err)
	}
	src := Source{
		Repo:   stripPassword(repo),
		Commit: strings.ToLower(commit),
		Path:   strings.TrimSuffix(prefix, "/"),
	}
	if status != "" {
		if !allowDirty {
			lines := strings.Split(status, "\n")
			more := ""
			if len(lines) > 5 {
				more = fmt.Sprintf(" (and %d more)", len(lines)-5)
				lines = lines[:5]
			}
			return Source{}, fmt.Errorf("git checkout %s has uncommitted changes; commit them, or allow a dirty tree: %s%s",
				dir, strings.Join(lines, "; "), more)
		}
		src.Dirty = true
	}
	if err := src.validate(); err != nil {
		return Source{}, fmt.Errorf("reading git checkout %s: %w", dir, err)
	}
	return src, nil
}

// stripPassword removes a password (often an access token) from a URL's
// user information so that it is never written into a manifest.
func stripPassword(repo string) string {
	if !strings.Contains(repo, "://") {
		return repo
	}
	u, err := url.Parse(repo)
	if err != nil || u.User == nil {
		return repo
	}
	if _, has := u.User.Password(); !has {
		return repo
	}
	u.User = url.User(u.User.Username())
	return u.String()
}

// passwordRE finds the password of a URL's user information.
var passwordRE = regexp.MustCompile(`(://[^/@:]*):[^/@]*@`)

// redact hides URL passwords in s, for messages.
func redact(s string) string {
	return passwordRE.ReplaceAllString(s, "$1:xxxxx@")
}

// validate checks one source; the message does not repeat the source.
func (s Source) validate() error {
	switch {
	case s.Repo == "":
		return errors.New("repo is empty")
	case len(s.Repo) > 2048:
		return errors.New("repo is longer than 2048 bytes")
	case strings.ContainsFunc(s.Repo, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("repo %q contains spaces or control characters", redact(s.Repo))
	}
	if strings.Contains(s.Repo, "://") {
		u, err := url.Parse(s.Repo)
		if err != nil {
			return fmt.Errorf("repo %q is not a valid URL", redact(s.Repo))
		}
		if _, has := u.User.Password(); has {
			return fmt.Errorf("repo %q carries a password: remove credentials from the URL", redact(s.Repo))
		}
	}
	if !isCommit(s.Commit) {
		return errors.New(commitProblem(s.Commit))
	}
	if s.Path != "" {
		if why := pathProblem(s.Path); why != "" {
			return fmt.Errorf("path %q: %s", s.Path, why)
		}
	}
	return nil
}

// isCommit reports whether c is a full, lowercase commit id.
func isCommit(c string) bool {
	return (len(c) == 40 || len(c) == 64) && isLowerHex(c)
}

// commitProblem says what is wrong with a commit id.
func commitProblem(c string) string {
	switch {
	case c == "":
		return "commit is empty (want the full 40- or 64-hex commit id)"
	case isHex(c) && (len(c) == 40 || len(c) == 64):
		return fmt.Sprintf("commit %q must be lowercase", c)
	case isHex(c) && len(c) < 40:
		return fmt.Sprintf("commit %q is abbreviated (%d hex digits): give the full 40- or 64-hex commit id", c, len(c))
	case isHex(c):
		return fmt.Sprintf("commit %q has %d hex digits (want 40 or 64)", c, len(c))
	default:
		return fmt.Sprintf("commit %q is not a commit id (want 40 or 64 hex digits; branch and tag names do not pin a build)", c)
	}
}
