//go:build !unix

package agent

// raiseFileLimit has no file limit to raise here.
func raiseFileLimit() (uint64, error) { return 0, nil }
