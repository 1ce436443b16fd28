package bundle

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"
)

// epoch is the modification time of every entry Pack writes.
var epoch = time.Unix(0, 0)

// Pack writes to w a bundle of every regular file under dir, described by m,
// and returns its digest ("sha256:<hex>" of the bytes written).
//
// Pack fills m's Format (when zero), Runtime (RuntimeGoPlugin when empty),
// for RuntimeGoPlugin the Toolchain's "go", "goos" and "goarch" when unset
// (from the entry's Go build information when it is a Go binary, else from
// the Go runtime running Pack), for RuntimePython3 the Entry when empty (the
// file of the Python block's WSGI module, found in its Path; see
// PackPython), and Files (replacing any given). A file is ModeExec when any
// execute bit is set, else ModePlain; owners, times and other bits are not
// kept. Empty directories are not kept. The manifest must then validate.
//
// Symlinks, devices, sockets and pipes under dir are refused, as is a
// manifest.json at its root (the name is the manifest's). A file that changes
// while Pack reads it is an error.
//
// The archive is deterministic: manifest.json first, then the files sorted by
// path, with zero times, owners and groups, and a gzip header without name or
// time. The same files and manifest always give the same bytes, and so the
// same digest, with the same compress/gzip implementation (that is, the same
// build of stickyd).
//
// Nothing is written to w before dir has been read and the manifest
// validated.
func Pack(dir string, m Manifest, w io.Writer) (digest string, err error) {
	return pack(dir, dir, m, w)
}

// pack is Pack, naming the build label in its errors.
func pack(dir, label string, m Manifest, w io.Writer) (digest string, err error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}
	if fi, err := os.Stat(root); err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	} else if !fi.IsDir() {
		return "", fmt.Errorf("packing %s: not a directory", label)
	}
	files, err := scan(root)
	if err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}

	m.Files = files
	if m.Format == 0 {
		m.Format = FormatVersion
	}
	if m.Runtime == "" {
		m.Runtime = RuntimeGoPlugin
	}
	m.Toolchain = maps.Clone(m.Toolchain)
	if m.Toolchain == nil {
		m.Toolchain = map[string]string{}
	}
	if m.Runtime == RuntimeGoPlugin {
		fillToolchain(m.Toolchain, filepath.Join(root, filepath.FromSlash(m.Entry)))
	}
	if m.Runtime == RuntimePython3 && m.Python != nil {
		py := *m.Python
		py.Path = append([]string(nil), py.Path...)
		m.Python = &py
		if m.Entry == "" {
			// The entry of a python3 bundle is its WSGI module's file.
			listed := make(map[string]File, len(files))
			for _, f := range files {
				listed[f.Path] = f
			}
			module, _ := SplitWSGI(py.WSGI)
			if moduleRE.MatchString(module) {
				m.Entry, _ = ModuleFile(module, py.Path, listed)
			}
		}
	}
	if err := m.Validate(); err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}
	manifest, err := m.encode()
	if err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}

	sum := sha256.New()
	gz, err := gzip.NewWriterLevel(io.MultiWriter(w, sum), gzip.BestCompression)
	if err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}
	tw := tar.NewWriter(gz)
	if err := tw.WriteHeader(header(ManifestName, int64(len(manifest)), ModePlain)); err != nil {
		return "", fmt.Errorf("packing %s: writing manifest: %w", label, err)
	}
	if _, err := tw.Write(manifest); err != nil {
		return "", fmt.Errorf("packing %s: writing manifest: %w", label, err)
	}
	for _, f := range files {
		if err := writeFile(tw, root, f); err != nil {
			return "", fmt.Errorf("packing %s: file %s: %w", label, f.Path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}
	if err := gz.Close(); err != nil {
		return "", fmt.Errorf("packing %s: %w", label, err)
	}
	return DigestPrefix + hex.EncodeToString(sum.Sum(nil)), nil
}

// header is the tar header of every bundle entry: a regular file with no
// owner and time.
func header(name string, size int64, mode FileMode) *tar.Header {
	return &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Size:     size,
		Mode:     int64(mode),
		ModTime:  epoch,
	}
}

// scan lists the regular files under root, sorted, with their sizes, sums
// and modes.
func scan(root string) ([]File, error) {
	var files []File
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t.IsDir():
			return nil
		case t&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			return fmt.Errorf("%s is a symlink (to %q): bundles hold only regular files; copy the target in its place", rel, target)
		case !t.IsRegular():
			return fmt.Errorf("%s is a %s: bundles hold only regular files", rel, kindOf(t))
		}
		if why := pathProblem(rel); why != "" {
			return fmt.Errorf("%q: %s", rel, why)
		}
		if rel == ManifestName {
			return fmt.Errorf("%s: the name is reserved for the bundle's manifest; move the file", rel)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		h, n, err := hashFile(p)
		if err != nil {
			return err
		}
		mode := ModePlain
		if fi.Mode().Perm()&0o111 != 0 {
			mode = ModeExec
		}
		files = append(files, File{Path: rel, Size: n, SHA256: h, Mode: mode})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, errors.New("no files to pack")
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Path < files[j].Path })
	return files, nil
}

// hashFile returns the hex SHA-256 and the size of a file's content.
func hashFile(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("reading %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeFile copies one scanned file into the archive, checking that it has
// not changed since it was scanned.
func writeFile(tw *tar.Writer, root string, f File) error {
	in, err := os.Open(filepath.Join(root, filepath.FromSlash(f.Path)))
	if err != nil {
		return err
	}
	defer in.Close()
	if err := tw.WriteHeader(header(f.Path, f.Size, f.Mode)); err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(tw, io.TeeReader(io.LimitReader(in, f.Size), h))
	if err != nil {
		return err
	}
	var one [1]byte
	if extra, _ := in.Read(one[:]); n != f.Size || extra > 0 {
		return errors.New("changed while packing (size)")
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return errors.New("changed while packing (content)")
	}
	return nil
}

// fillToolchain sets "go", "goos" and "goarch" where unset: from the Go
// build information of the entry when it is a Go binary, else from the
// running Go runtime.
func fillToolchain(tc map[string]string, entry string) {
	goVersion, goos, goarch := runtime.Version(), runtime.GOOS, runtime.GOARCH
	if bi, err := buildinfo.ReadFile(entry); err == nil {
		goVersion = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "GOOS":
				goos = s.Value
			case "GOARCH":
				goarch = s.Value
			}
		}
	}
	for k, v := range map[string]string{"go": goVersion, "goos": goos, "goarch": goarch} {
		if _, ok := tc[k]; !ok {
			tc[k] = v
		}
	}
}

// kindOf names the kind of file a mode describes, for messages.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "block device"
	case m.IsRegular():
		return "regular file"
	default:
		return "special file"
	}
}
