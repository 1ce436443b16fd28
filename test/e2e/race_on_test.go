//go:build race

package e2e

// raceEnabled scales the stress test down under the race detector (about
// ten times slower); `make test` also runs it at full size without it.
const raceEnabled = true
