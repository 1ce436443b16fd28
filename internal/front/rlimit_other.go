//go:build !unix

package front

// raiseFileLimit has no file limit to raise here.
func raiseFileLimit() (uint64, error) { return 0, nil }
