package command

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// formatBytes writes a size for people in binary units, as `worker list`
// and the monitor page do: 512 B, 1.5 KiB, 12 KiB, 3.2 MiB.
func formatBytes(n int) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"KiB", "MiB", "GiB"} {
		v /= 1024
		if v < 1024 || unit == "GiB" {
			return roundTo(v, 1) + " " + unit
		}
	}
	panic("unreachable")
}

// formatDuration writes a duration for people: 850 µs, 3 ms, 3.2 ms,
// 120 ms, 1.25 s, 1m30s.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%d µs", d.Microseconds())
	case d < time.Second:
		return roundTo(float64(d)/float64(time.Millisecond), 1) + " ms"
	case d < time.Minute:
		return roundTo(d.Seconds(), 2) + " s"
	}
	return d.Round(time.Second).String()
}

// roundTo writes v with up to decimals decimals below 10 and none above,
// dropping trailing zeros: 3, 3.2, 12, 120.
func roundTo(v float64, decimals int) string {
	if v >= 10 {
		decimals = 0
	}
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// formatTable aligns rows under a header row, columns three spaces apart.
func formatTable(header []string, rows [][]string) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	fmt.Fprintln(w, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(w, strings.Join(r, "\t"))
	}
	_ = w.Flush()
	return strings.TrimRight(b.String(), "\n")
}

// formatKV aligns "Key = value" lines, Nomad style.
func formatKV(pairs [][2]string) string {
	width := 0
	for _, p := range pairs {
		width = max(width, len(p[0]))
	}
	lines := make([]string, len(pairs))
	for i, p := range pairs {
		lines[i] = fmt.Sprintf("%-*s = %s", width, p[0], p[1])
	}
	return strings.Join(lines, "\n")
}

// orDash writes "-" for an empty field of a table.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
