// Command demo-worker is the demo application as a stickyd worker plugin:
// stickyd starts it and talks to it on its channel; it never listens on the
// network. Run by hand, it explains itself and exits.
package main

import (
	"github.com/stickyd/stickyd/plugins/examples/demo"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() {
	worker.Serve(demo.New(), worker.Options{Name: "demo", Version: "1"})
}
