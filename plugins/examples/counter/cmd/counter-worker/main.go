// Command counter-worker runs the counter application as a stickyd worker
// plugin.
package main

import (
	"github.com/stickyd/stickyd/plugins/examples/counter"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() {
	worker.Serve(counter.New(), worker.Options{Name: "counter", Version: "1"})
}
