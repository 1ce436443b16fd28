// Command demo-worker is the demo application as a stickyd worker plugin:
// stickyd starts it and talks to it on its channel; it never listens on the
// network. Run by hand, it explains itself and exits.
//
// -release 2 runs the demo's second build (see demo.Release), to try moving
// people between versions. The worker serves the demo with its engine (see
// demo.App.WithEngine): with STICKYD_TEMPLATE_DIR set, the engine is built
// once for the group and mapped by every worker (docs/templates.md);
// -engine=false serves the demo without it.
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
	engine := flag.Bool("engine", true, "build (or map) the demo's engine before serving")
	flag.Parse()
	if *release < 1 || *release > 2 {
		fmt.Fprintln(os.Stderr, "demo-worker: -release must be 1 or 2")
		os.Exit(2)
	}
	app := demo.NewRelease(demo.Release(*release))
	var served worker.App = app
	if *engine {
		served = app.WithEngine()
	}
	worker.Serve(served, worker.Options{Name: "demo", Version: strconv.Itoa(*release)})
}
