//go:build race

package worker

// raceEnabled: the race detector keeps shadow memory the process never
// gives back, so RSS is not measured under it.
const raceEnabled = true
