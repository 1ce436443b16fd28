package benchkit

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// Flags is a benchmark's flag set, with the two flags every benchmark has:
// -quick, a smoke run that lowers the defaults of some other flags, and
// -log, the agent's log level. Its errors are returned, never exits.
type Flags struct {
	*flag.FlagSet
	quick    *bool
	logLevel *string
}

// NewFlags returns the flag set of the program name, writing usage and
// errors to stderr. quickUsage says what -quick changes.
func NewFlags(name, quickUsage string, stderr io.Writer) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return &Flags{
		FlagSet:  fs,
		quick:    fs.Bool("quick", false, quickUsage),
		logLevel: fs.String("log", "warn", "agent log level on stderr: trace, debug, info, warn, error or off"),
	}
}

// Parse parses args. A positional argument is an error; -help returns
// flag.ErrHelp.
func (f *Flags) Parse(args []string) error {
	if err := f.FlagSet.Parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", f.Args())
	}
	return nil
}

// QuickDefault reports whether -quick sets the flag name: -quick was given
// and name was not. Call it after Parse.
func (f *Flags) QuickDefault(name string) bool {
	if !*f.quick {
		return false
	}
	given := false
	f.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	return !given
}

// LogLevel is -log as a level; an unknown level is an error. Call it after
// Parse.
func (f *Flags) LogLevel() (hclog.Level, error) {
	l := hclog.LevelFromString(*f.logLevel)
	if l == hclog.NoLevel {
		return l, fmt.Errorf("-log: unknown level %q", *f.logLevel)
	}
	return l, nil
}

// Size is a page-state size as the user wrote it and in bytes.
type Size struct {
	Label string
	Bytes int
}

// ParseSizes reads a comma-separated list of sizes (see ParseSize), in
// order; empty items are skipped, so the list may come back empty.
func ParseSizes(list string) ([]Size, error) {
	var out []Size
	for _, s := range SplitList(list) {
		n, err := ParseSize(s)
		if err != nil {
			return nil, err
		}
		out = append(out, Size{Label: s, Bytes: n})
	}
	return out, nil
}

// ParseSize reads "512", "512B", "1KB", "10MB" (binary multiples, any
// case), from 0 to 256MB.
func ParseSize(s string) (int, error) {
	u := strings.ToUpper(s)
	mult := 1
	switch {
	case strings.HasSuffix(u, "KB"):
		mult, u = 1<<10, strings.TrimSuffix(u, "KB")
	case strings.HasSuffix(u, "MB"):
		mult, u = 1<<20, strings.TrimSuffix(u, "MB")
	case strings.HasSuffix(u, "B"):
		u = strings.TrimSuffix(u, "B")
	}
	n, err := strconv.Atoi(strings.TrimSpace(u))
	if err != nil || n < 0 || n > (256<<20)/mult {
		return 0, fmt.Errorf("%q is not a size of 0 to 256MB", s)
	}
	return n * mult, nil
}

// SplitList splits a comma-separated flag value into its trimmed, non-empty
// items.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
