// Package dev runs a Go application on stickyd from the application's own
// main: the binary it builds is stickyd with the application compiled in,
// so `go run .` (or `go run . dev`) serves the application on in-process
// workers, with the front, an in-memory raft server and the admin API, as
// `stickyd dev` serves the demo. Every other stickyd command works too
// (`go run . agent -config stickyd.hcl` runs a group whose builtin is the
// application), and the same App runs unchanged as a go-plugin worker with
// worker.Serve.
//
// Package dev belongs to the product's module (github.com/stickyd/stickyd),
// not to the SDK's (github.com/stickyd/stickyd/plugins/worker): it compiles
// all of stickyd into the application's binary, which is what it is for. A
// plugin worker imports package worker alone and needs none of it.
//
//	func main() {
//		dev.Main(myapp.New(), worker.Options{Name: "myapp", Version: "1.2.0"})
//	}
package dev

import (
	"os"

	"github.com/hashicorp/cli"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/command"
	"github.com/stickyd/stickyd/plugins/worker"
)

// Main runs stickyd's command line (os.Args) with app compiled in under
// opts.Name, and exits with its code. With no arguments it runs dev.
func Main(app worker.App, opts worker.Options) {
	os.Exit(Run(os.Args[1:], app, opts))
}

// Run is Main without the exit: it runs stickyd's command line args with
// app compiled in under opts.Name (default "app") and returns the exit
// code. With no arguments it runs dev, whose default application is app.
func Run(args []string, app worker.App, opts worker.Options) int {
	if opts.Name == "" {
		opts.Name = "app"
	}
	if len(args) == 0 {
		args = []string{"dev"}
	}
	builtins := map[string]agent.Builtin{opts.Name: worker.InProcess(app, opts)}
	ui := &cli.BasicUi{Reader: os.Stdin, Writer: os.Stdout, ErrorWriter: os.Stderr}
	return command.RunApp(args, ui, builtins, opts.Name)
}
