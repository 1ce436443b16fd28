package benchkit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
)

// Program is one benchmark program: how it reads its flags (options O),
// what it measures (results R) and how it prints them.
type Program[O, R any] struct {
	// Name starts the program's error messages.
	Name string
	// Parse reads the flags, writing usage and flag errors to stderr. It
	// returns flag.ErrHelp for -help.
	Parse func(args []string, stderr io.Writer) (O, error)
	// Measure runs the benchmark, progress on stderr. The first failed
	// operation ends it with an error: an error is never a result. ctx
	// ends on SIGINT or SIGTERM.
	Measure func(ctx context.Context, o O, stderr io.Writer) (R, error)
	// Report prints what Measure returned.
	Report func(stdout io.Writer, o O, r R)
}

// Main is the program's main function: it serves the counter worker plugin
// when the program was re-executed as one (see ServeWorkerIfAsked), and
// otherwise runs the program with the command line and exits with Run's
// code.
func (p Program[O, R]) Main() {
	if ServeWorkerIfAsked() {
		return
	}
	os.Exit(p.Run(os.Args[1:], os.Stdout, os.Stderr))
}

// Run parses args, measures and prints the report on stdout. It returns the
// exit code: 0 for a report or -help, 2 for bad flags, 1 when the
// measurement failed, in which case stdout gets nothing.
func (p Program[O, R]) Run(args []string, stdout, stderr io.Writer) int {
	o, err := p.Parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
		return 2
	}
	// The root context of the program: an interrupt ends the run.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// STICKYD_BENCH_CPUPROFILE=FILE writes a CPU profile of this process
	// (the agent and the clients it runs, not the worker subprocesses).
	if f := os.Getenv("STICKYD_BENCH_CPUPROFILE"); f != "" {
		out, err := os.Create(f)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
			return 2
		}
		defer out.Close()
		if err := pprof.StartCPUProfile(out); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", p.Name, err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	r, err := p.Measure(ctx, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: FAILED: %v\n", p.Name, err)
		return 1
	}
	p.Report(stdout, o, r)
	return 0
}
