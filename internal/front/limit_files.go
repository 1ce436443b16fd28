package front

// Connections is front.max_connections, or when it is 0 the bound
// derived from the process's file limit (raised to its hard limit first):
// the limit less a fifth of it (at least 256, at most 10000), kept for
// raft, the park store, the workers and the admin API. It also returns the
// file limit (0 if unknown, and then no bound unless configured).
func Connections(configured int) (int, uint64) {
	files, _ := raiseFileLimit()
	if configured > 0 {
		return configured, files
	}
	if files == 0 || files > 1<<30 {
		return 0, files
	}
	reserve := min(max(files/5, 256), 10000)
	if files <= reserve {
		return 1, files
	}
	return int(files - reserve), files
}
