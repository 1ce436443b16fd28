// Command demo-worker is the demo application as a stickyd worker plugin:
// stickyd starts it and talks to it on its channel; it never listens on the
// network. Run by hand, it explains itself and exits.
//
// -release 2 runs the demo's second build (see demo.Release), to try moving
// people between versions.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"

	"github.com/stickyd/stickyd/plugins/examples/demo"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() {
	release := flag.Int("release", 1, "which build of the demo to run (1 or 2)")
	flag.Parse()
	if *release < 1 || *release > 2 {
		fmt.Fprintln(os.Stderr, "demo-worker: -release must be 1 or 2")
		os.Exit(2)
	}
	worker.Serve(demo.NewRelease(demo.Release(*release)), worker.Options{Name: "demo", Version: strconv.Itoa(*release)})
}
