// Command taskboard-dev is stickyd with the task board compiled in, for
// development in one process: with no arguments it runs stickyd dev, the
// task board on in-process workers; any stickyd command works too
// (taskboard-dev agent -config taskboard.hcl, with group builtin =
// "taskboard"). It needs the product's whole module, so it is a module of
// its own beside the app's, which needs the SDK alone.
package main

import (
	"example.com/taskboard"

	"github.com/stickyd/stickyd/plugins/dev"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() { dev.Main(taskboard.New(), worker.Options{Name: "taskboard", Version: "1"}) }
