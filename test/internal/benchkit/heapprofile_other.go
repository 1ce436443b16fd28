//go:build !unix

package benchkit

// HeapProfileOnSignal is for unix systems only.
func HeapProfileOnSignal(string) {}

// CollectOnSignal is for unix systems only.
func CollectOnSignal() {}
