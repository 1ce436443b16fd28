// Command stickyd is the one binary of stickyd: agent, dev mode and the
// operator's CLI.
package main

import (
	"os"

	"github.com/stickyd/stickyd/internal/command"
)

func main() {
	os.Exit(command.Run(os.Args[1:]))
}
