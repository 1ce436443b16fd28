package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// rssOf is the resident memory of process pid in bytes (VmRSS in
// /proc/pid/status).
func rssOf(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("reading process %d's memory: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "VmRSS:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("process %d: reading VmRSS %q: %w", pid, v, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("process %d has no VmRSS (a zombie?)", pid)
}

// childrenOf lists the processes whose parent is pid (any of its threads:
// /proc/pid/task/*/children).
func childrenOf(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// rssOfAll is the resident memory of every process of pids, summed.
func rssOfAll(pids []int) (int64, error) {
	var sum int64
	for _, p := range pids {
		n, err := rssOf(p)
		if err != nil {
			return 0, err
		}
		sum += n
	}
	return sum, nil
}
