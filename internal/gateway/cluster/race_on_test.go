//go:build race

package cluster

// raceEnabled scales the population test down under the race detector
// (about ten times slower); `make test` also runs it at full size without it.
const raceEnabled = true
