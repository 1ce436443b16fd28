package worker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// A group's template is its App's engine, built once per build of the worker
// and frozen into an image file that every worker of the group maps
// read-only. Go cannot fork a running runtime (its threads, GC and
// scheduler do not survive fork), so a "template" cannot be a forked warm
// process: it is this file, whose pages the kernel shares between the
// workers through its page cache. See docs/templates.md.

// TemplateDirEnv names the directory of a group's engine images. The host
// sets it per group; without it every worker builds its own engine.
const TemplateDirEnv = "STICKYD_TEMPLATE_DIR"

// How a worker got its engine, in the "engine ready" log line.
const (
	engineCold   = "cold"   // built here, no template directory
	engineBuilt  = "built"  // built here and saved as the template
	engineMapped = "mapped" // mapped from the template another start built
)

// The image file: a header page, the App's payload, a trailer.
//
//	header (imageHeaderSize bytes, so the payload starts page-aligned)
//	  0  magic        8 bytes  "STKDENG\x00"
//	  8  format       uint32   imageFormat
//	  12 header size  uint32   imageHeaderSize
//	  16 key          32 bytes the template key (engineKey)
//	  48 payload len  uint64
//	  56 payload sum  32 bytes sha256 of the payload
//	  88 header sum   32 bytes sha256 of bytes 0-87
//	  zeros to imageHeaderSize
//	payload
//	trailer (imageTrailerSize bytes)
//	  0  magic        8 bytes  "STKDEND\x00"
//	  8  payload len  uint64
//	  16 key          first 16 bytes
//
// Integers are little-endian. A start checks the size, the header (magic,
// format, key, length, header sum) and the trailer: a short, torn or
// foreign file fails these. It does not hash the payload, which would read
// every page of a large image at every start; images are written whole
// (temporary file, fsync, rename), so only a disk that flips bits could
// damage a payload that passes, and the payload sum is there to check for
// that offline (verifyPayload).
const (
	imageMagic       = "STKDENG\x00"
	imageEndMagic    = "STKDEND\x00"
	imageFormat      = 1
	imageHeaderSize  = 4096
	imageTrailerSize = 32
	headerSumAt      = 88
)

// Errors of the template.
var (
	// errBadImage wraps every reason an image file is not used.
	errBadImage = errors.New("engine image is not valid")
)

// engineImage is a loaded engine's memory: a read-only mapping of the
// image file, or a read-only copy of a cold build.
type engineImage struct {
	mem     []byte // what to unmap: the whole mapping
	payload []byte // what the App reads
	release func([]byte) error
}

// close unmaps the image; the App must not read it any more.
func (m *engineImage) close() error {
	if m == nil || m.release == nil || m.mem == nil {
		return nil
	}
	err := m.release(m.mem)
	m.mem, m.payload = nil, nil
	return err
}

// engineStart is how a worker got its engine, for the log and for tests.
type engineStart struct {
	How   string // engineCold, engineBuilt or engineMapped
	Path  string // the image file; "" when cold
	Bytes int    // the payload's size

	// Where the time went: hashing the executable for the key, waiting for
	// another worker's build (the lock), BuildEngine, writing the file,
	// mapping and checking it, LoadEngine; Total is all of it.
	Key, Wait, Build, Save, Map, Load, Total time.Duration
}

// engines holds the engine of each App value in this process: in-process
// workers of one App (stickyd dev) share its engine, which is loaded once
// and unmapped when the last of them ends.
var engines = struct {
	mu sync.Mutex // guards m and every sharedEngine's refs
	m  map[Engine]*sharedEngine
}{m: map[Engine]*sharedEngine{}}

type sharedEngine struct {
	ready chan struct{} // closed once img and err are set
	// img and err are set under engines.mu, once; read them after ready.
	img  *engineImage
	err  error
	refs int // workers using it; guarded by engines.mu
}

// startEngine gives a starting worker its App's engine, if the App has one,
// and returns what to call when the worker ends. It is the SDK's hook
// between the channel opening and the hello, so the host counts a worker as
// started only once its engine is loaded.
func startEngine(ctx context.Context, app App, opts Options, log hclog.Logger) (release func(), err error) {
	e, ok := app.(Engine)
	if !ok {
		return func() {}, nil
	}
	if !reflect.TypeOf(e).Comparable() {
		// Not usable as a map key, so not shared: this worker has its own.
		img, _, err := loadEngine(ctx, e, opts, log)
		if err != nil {
			return nil, err
		}
		return func() { closeEngine(img, log) }, nil
	}
	engines.mu.Lock()
	s := engines.m[e]
	if s == nil {
		s = &sharedEngine{ready: make(chan struct{}), refs: 1}
		engines.m[e] = s
		engines.mu.Unlock()
		img, _, err := loadEngine(ctx, e, opts, log)
		engines.mu.Lock()
		s.img, s.err = img, err
		engines.mu.Unlock()
		close(s.ready)
	} else {
		s.refs++
		engines.mu.Unlock()
		log.Info("engine shared with this process's other workers of the app")
		select {
		case <-s.ready:
		case <-ctx.Done():
			s.release(e, log)
			return nil, fmt.Errorf("waiting for the engine: %w", ctx.Err())
		}
	}
	if s.err != nil {
		s.release(e, log)
		return nil, s.err
	}
	return sync.OnceFunc(func() { s.release(e, log) }), nil
}

// release drops a worker's hold; the last one unmaps the image. A failed
// load is forgotten at once, so that the next start tries again.
func (s *sharedEngine) release(e Engine, log hclog.Logger) {
	engines.mu.Lock()
	s.refs--
	last, failed, img := s.refs == 0, s.err != nil, s.img
	if (last || failed) && engines.m[e] == s {
		delete(engines.m, e)
	}
	engines.mu.Unlock()
	if last {
		closeEngine(img, log)
	}
}

func closeEngine(img *engineImage, log hclog.Logger) {
	if err := img.close(); err != nil {
		log.Warn("unmapping the engine image", "error", err)
	}
}

// loadEngine builds or maps e's engine and loads it: from the template when
// TemplateDirEnv names a directory, else cold.
func loadEngine(ctx context.Context, e Engine, opts Options, log hclog.Logger) (*engineImage, *engineStart, error) {
	start := time.Now()
	var (
		img *engineImage
		st  *engineStart
		err error
	)
	if dir := os.Getenv(TemplateDirEnv); dir != "" && mmapSupported {
		img, st, err = templateEngine(ctx, e, opts, dir, log)
	} else {
		if dir != "" {
			log.Warn("engine templates need Linux; building the engine here", "dir", dir)
		}
		img, st, err = coldEngine(ctx, e)
	}
	if err != nil {
		return nil, nil, err
	}
	t := time.Now()
	if err := e.LoadEngine(img.payload); err != nil {
		closeEngine(img, log)
		return nil, nil, fmt.Errorf("loading the engine: %w", err)
	}
	st.Load = time.Since(t)
	st.Total = time.Since(start)
	// Durations as their String ("1.2335s"): in a plugin's JSON log a
	// time.Duration is a number of nanoseconds, which the host's text log
	// then prints as a float ("1.233524177e+09").
	log.Info("engine ready", "how", st.How, "took", st.Total.String(), "bytes", st.Bytes, "image", st.Path,
		"key_time", st.Key.String(), "wait", st.Wait.String(), "build", st.Build.String(), "save", st.Save.String(),
		"map", st.Map.String(), "load", st.Load.String())
	return img, st, nil
}

// coldEngine builds the engine and copies it into read-only memory, so that
// an App that writes to its engine faults with or without a template.
func coldEngine(ctx context.Context, e Engine) (*engineImage, *engineStart, error) {
	st := &engineStart{How: engineCold}
	t := time.Now()
	b, err := build(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	st.Build = time.Since(t)
	t = time.Now()
	img, err := readOnlyCopy(b)
	if err != nil {
		return nil, nil, fmt.Errorf("copying the engine to read-only memory: %w", err)
	}
	st.Map, st.Bytes = time.Since(t), len(b)
	// The build's garbage (the heap image and whatever the App used to make
	// it) goes back to the OS before the worker serves, not minutes later.
	debug.FreeOSMemory()
	return img, st, nil
}

func build(ctx context.Context, e Engine) ([]byte, error) {
	b, err := e.BuildEngine(ctx)
	if err != nil {
		return nil, fmt.Errorf("building the engine: %w", err)
	}
	return b, nil
}

// templateEngine maps the group's image for this build, building and saving
// it first if it is missing or not valid. Workers that start together build
// it once: the first takes the key's lock and builds, the others wait on
// the lock and then map what it wrote.
func templateEngine(ctx context.Context, e Engine, opts Options, dir string, log hclog.Logger) (*engineImage, *engineStart, error) {
	st := &engineStart{}
	t := time.Now()
	key, err := templateKey(opts)
	if err != nil {
		return nil, nil, err
	}
	st.Key = time.Since(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("making the template directory: %w", err)
	}
	st.Path = filepath.Join(dir, hex.EncodeToString(key[:])+".img")

	t = time.Now()
	img, err := mapImage(st.Path, key)
	st.Map = time.Since(t)
	if err == nil {
		st.How, st.Bytes = engineMapped, len(img.payload)
		return img, st, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		log.Warn("engine image not usable, rebuilding it", "image", st.Path, "error", err)
	}

	t = time.Now()
	unlock, err := lockKey(ctx, filepath.Join(dir, hex.EncodeToString(key[:])+".lock"), log)
	if err != nil {
		return nil, nil, err
	}
	defer unlock()
	st.Wait = time.Since(t)
	// Another worker may have built it while this one waited.
	t = time.Now()
	img, err = mapImage(st.Path, key)
	st.Map += time.Since(t)
	if err == nil {
		st.How, st.Bytes = engineMapped, len(img.payload)
		return img, st, nil
	}

	removePartial(st.Path, log)
	t = time.Now()
	b, err := build(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	st.Build, st.Bytes = time.Since(t), len(b)
	t = time.Now()
	err = writeImage(st.Path, key, b)
	st.Save = time.Since(t)
	if err == nil {
		t = time.Now()
		img, err = mapImage(st.Path, key)
		st.Map += time.Since(t)
		st.How = engineBuilt
	}
	if err != nil {
		// The worker can still start from what it built; the next start
		// tries the template again.
		log.Error("saving and mapping the engine image; this worker starts from its own build", "image", st.Path, "error", err)
		if img, err = readOnlyCopy(b); err != nil {
			return nil, nil, fmt.Errorf("copying the engine to read-only memory: %w", err)
		}
		st.How, st.Path = engineCold, ""
	}
	debug.FreeOSMemory() // as in coldEngine
	return img, st, nil
}

// removePartial removes the temporary files of image builds that died
// before their rename. The caller holds the key's lock, so no live build is
// writing one.
func removePartial(image string, log hclog.Logger) {
	partial, _ := filepath.Glob(image + ".tmp*")
	for _, p := range partial {
		if err := os.Remove(p); err == nil {
			log.Info("removed the partial image of a build that did not finish", "file", p)
		}
	}
}

// prepareEngine starts hashing the executable for the template key, so that
// the hash runs while go-plugin and the host set up the channel rather than
// after (about 20 ms for a 20 MB binary).
func prepareEngine(app App) {
	if _, ok := app.(Engine); ok && os.Getenv(TemplateDirEnv) != "" && mmapSupported {
		// It ends by itself; startEngine's exeSum call waits for it.
		go func() { _, _ = exeSum() }()
	}
}

// exeSum is the sha256 of this process's executable, read once.
var exeSum = sync.OnceValues(func() ([32]byte, error) {
	var sum [32]byte
	exe, err := os.Executable()
	if err != nil {
		return sum, fmt.Errorf("finding the executable for the template key: %w", err)
	}
	f, err := os.Open(exe)
	if err != nil {
		return sum, fmt.Errorf("reading the executable for the template key: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return sum, fmt.Errorf("hashing the executable for the template key: %w", err)
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
})

func templateKey(opts Options) ([32]byte, error) {
	exe, err := exeSum()
	if err != nil {
		return [32]byte{}, err
	}
	return engineKey(exe, opts.Name, opts.Version), nil
}

// engineKey names the image of one build of one App: the executable's
// content, the App's name and version. Any change to the binary is a new
// key, so a new build never reads an old build's image, whatever layout
// either gives it.
func engineKey(exe [32]byte, name, version string) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "stickyd engine image %d\x00", imageFormat)
	h.Write(exe[:])
	// Lengths first, so that no two (name, version) pairs hash the same.
	fmt.Fprintf(h, "%d:%s%d:%s", len(name), name, len(version), version)
	var k [32]byte
	copy(k[:], h.Sum(nil))
	return k
}

// lockKey takes the key's exclusive lock, waiting while another process (or
// another worker of this one) holds it. flock is released by the kernel if
// the holder dies, so a crashed build never blocks the group. The lock file
// is never removed: removing it would let two workers lock two different
// files of the same name.
func lockKey(ctx context.Context, path string, log hclog.Logger) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the template lock: %w", err)
	}
	logged := false
	for {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking the template: %w", err)
		}
		if ok {
			return func() { f.Close() }, nil // closing the file releases the lock
		}
		if !logged {
			log.Info("waiting for another worker to build the engine", "lock", path)
			logged = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for the template lock: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// encodeHeader and encodeTrailer lay out an image's ends for payload.
func encodeHeader(key [32]byte, payload []byte) []byte {
	h := make([]byte, imageHeaderSize)
	copy(h[0:8], imageMagic)
	binary.LittleEndian.PutUint32(h[8:12], imageFormat)
	binary.LittleEndian.PutUint32(h[12:16], imageHeaderSize)
	copy(h[16:48], key[:])
	binary.LittleEndian.PutUint64(h[48:56], uint64(len(payload)))
	sum := sha256.Sum256(payload)
	copy(h[56:88], sum[:])
	hs := sha256.Sum256(h[:headerSumAt])
	copy(h[headerSumAt:headerSumAt+32], hs[:])
	return h
}

func encodeTrailer(key [32]byte, n int) []byte {
	t := make([]byte, imageTrailerSize)
	copy(t[0:8], imageEndMagic)
	binary.LittleEndian.PutUint64(t[8:16], uint64(n))
	copy(t[16:32], key[:16])
	return t
}

// checkImage tells whether b, a whole image file, is a valid image of key,
// and returns its payload.
func checkImage(b []byte, key [32]byte) ([]byte, error) {
	if len(b) < imageHeaderSize+imageTrailerSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a header and a trailer", errBadImage, len(b))
	}
	h := b[:imageHeaderSize]
	if string(h[0:8]) != imageMagic {
		return nil, fmt.Errorf("%w: bad magic %q", errBadImage, h[0:8])
	}
	hs := sha256.Sum256(h[:headerSumAt])
	if !bytes.Equal(hs[:], h[headerSumAt:headerSumAt+32]) {
		return nil, fmt.Errorf("%w: header checksum mismatch", errBadImage)
	}
	if f := binary.LittleEndian.Uint32(h[8:12]); f != imageFormat {
		return nil, fmt.Errorf("%w: format %d, this SDK reads %d", errBadImage, f, imageFormat)
	}
	if hsz := binary.LittleEndian.Uint32(h[12:16]); hsz != imageHeaderSize {
		return nil, fmt.Errorf("%w: header of %d bytes", errBadImage, hsz)
	}
	if !bytes.Equal(h[16:48], key[:]) {
		return nil, fmt.Errorf("%w: built for another key", errBadImage)
	}
	n := binary.LittleEndian.Uint64(h[48:56])
	if want := uint64(imageHeaderSize) + n + imageTrailerSize; uint64(len(b)) != want {
		return nil, fmt.Errorf("%w: %d bytes, the header says %d", errBadImage, len(b), want)
	}
	t := b[len(b)-imageTrailerSize:]
	if string(t[0:8]) != imageEndMagic || binary.LittleEndian.Uint64(t[8:16]) != n || !bytes.Equal(t[16:32], key[:16]) {
		return nil, fmt.Errorf("%w: bad trailer", errBadImage)
	}
	return b[imageHeaderSize : imageHeaderSize+int(n)], nil
}

// verifyPayload checks the payload against the header's sum: it reads every
// page, so starts do not call it (see the format's comment).
func verifyPayload(b []byte) error {
	sum := sha256.Sum256(b[imageHeaderSize : len(b)-imageTrailerSize])
	if !bytes.Equal(sum[:], b[56:88]) {
		return fmt.Errorf("%w: payload checksum mismatch", errBadImage)
	}
	return nil
}

// writeImage writes payload as key's image at path, atomically: a reader
// sees the old file, no file, or the whole new one, never a part.
func writeImage(path string, key [32]byte, payload []byte) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("creating the image file: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	for _, part := range [][]byte{encodeHeader(key, payload), payload, encodeTrailer(key, len(payload))} {
		if _, err := f.Write(part); err != nil {
			return fmt.Errorf("writing the image file: %w", err)
		}
	}
	if err := f.Chmod(0o444); err != nil {
		return fmt.Errorf("making the image file read-only: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing the image file: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing the image file: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("renaming the image file into place: %w", err)
	}
	if d, err := os.Open(dir); err == nil {
		err = d.Sync()
		d.Close()
		if err != nil {
			return fmt.Errorf("syncing the template directory: %w", err)
		}
	}
	return nil
}

// mapImage maps path read-only and checks it is key's image. An error wraps
// fs.ErrNotExist when there is no file, errBadImage when it is not valid.
func mapImage(path string, key [32]byte) (*engineImage, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening the engine image: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the engine image's size: %w", err)
	}
	if fi.Size() < imageHeaderSize+imageTrailerSize {
		return nil, fmt.Errorf("%w: %d bytes, shorter than a header and a trailer", errBadImage, fi.Size())
	}
	mem, err := mapFile(f, int(fi.Size()))
	if err != nil {
		return nil, fmt.Errorf("mapping the engine image: %w", err)
	}
	payload, err := checkImage(mem, key)
	if err != nil {
		_ = unmap(mem)
		return nil, err
	}
	return &engineImage{mem: mem, payload: payload, release: unmap}, nil
}
