package governor

import (
	"fmt"
	"time"
)

// pct formats a fraction as a whole percentage: 0.913 → "91%".
func pct(f float64) string {
	return fmt.Sprintf("%.0f%%", f*100)
}

// quantity formats v in res's unit: "0.95 cores", "932 MiB", "8123 goroutines".
func quantity(res Resource, v float64) string {
	switch res {
	case CPU:
		return fmt.Sprintf("%.2f cores", v)
	case Memory:
		return byteSize(v)
	case Goroutines:
		return fmt.Sprintf("%.0f goroutines", v)
	case Mailbox:
		return fmt.Sprintf("%.0f frames", v)
	}
	return fmt.Sprintf("%g", v)
}

// byteSize formats a byte count in binary units: "932 MiB", "1.0 GiB".
func byteSize(v float64) string {
	const unit = 1024
	if v < unit && v > -unit {
		return fmt.Sprintf("%.0f B", v)
	}
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	i := -1
	for (v >= unit || v <= -unit) && i < len(units)-1 {
		v /= unit
		i++
	}
	if v >= 10 || v <= -10 {
		return fmt.Sprintf("%.0f %s", v, units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}

// dur formats a duration rounded to the second: "18m20s".
func dur(d time.Duration) string {
	return d.Round(time.Second).String()
}

// count formats n things: "1 user", "3 users".
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
