//go:build unix

package front

import "syscall"

// raiseFileLimit raises the process's soft limit of open files to its hard
// limit and returns the limit it then has (0 if it cannot be read).
func raiseFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < l.Max {
		raised := syscall.Rlimit{Cur: l.Max, Max: l.Max}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
			return l.Cur, err
		}
		l.Cur = l.Max
	}
	return l.Cur, nil
}
