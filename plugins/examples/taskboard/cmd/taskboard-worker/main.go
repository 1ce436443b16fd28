// Command taskboard-worker runs the task board as stickyd worker plugins:
// stickyd dev -plugin ./taskboard-worker, or a group's plugin block.
package main

import (
	"example.com/taskboard"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() { worker.Serve(taskboard.New(), worker.Options{Name: "taskboard", Version: "1"}) }
