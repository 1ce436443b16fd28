// Package placement names where people live, in the words the front and the
// supervisor share: a Route from a connection to its user's worker and epoch.
// It holds types only, so the front can read the maps without knowing how
// they are replicated.
package placement

// Route is where the frames of one connection go.
type Route struct {
	Conn   string
	User   string
	Worker string
	// Epoch is the user's epoch: it grows each time the user's home
	// changes, and every frame carries it.
	Epoch uint64
}
