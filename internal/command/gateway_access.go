package command

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// What the key and tenant commands share: the flags of an allowance (a
// budget with its period, the limits, the models) and how they are shown.

// allowanceHelp is the help of the allowance's flags.
const allowanceHelp = `
  -budget=DOLLARS    What it may spend in each period, in US dollars to
                     the micro-dollar ("5", "0.25", "$12.50"). 0: none
                     of its own (a key then has the gateway's key_budget,
                     if it sets one).
  -period=PERIOD     The budget's period: "day" or "month" (calendar days
                     and months in the gateway's day_zone), or "total"
                     (over its life). Default total.
  -rpm=N             Calls admitted per minute (0: no bound).
  -tpm=N             Tokens (input, cached and output) per minute: a call
                     is refused while the calls that ended in the last
                     minute used as many (0: no bound).
  -concurrency=N     Calls running at once (0: no bound).
  -models=A,B        The models it may call (empty: every model).`

// allowanceFlags are the allowance's flags, as given.
type allowanceFlags struct {
	budget, period, models string
	rpm, concurrency       int
	tpm                    int64
}

func (a *allowanceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.budget, "budget", "0", "")
	fs.StringVar(&a.period, "period", "total", "")
	fs.IntVar(&a.rpm, "rpm", 0, "")
	fs.Int64Var(&a.tpm, "tpm", 0, "")
	fs.IntVar(&a.concurrency, "concurrency", 0, "")
	fs.StringVar(&a.models, "models", "", "")
}

// parsed checks the flags and returns the budget in micro-dollars, the
// period as the API says it ("" for total) and the models.
func (a *allowanceFlags) parsed() (micros int64, period string, models []string, err error) {
	if micros, err = parseDollars(a.budget); err != nil {
		return 0, "", nil, fmt.Errorf("-budget=%s: %w", a.budget, err)
	}
	switch a.period {
	case "total", "":
	case "day", "month":
		period = a.period
	default:
		return 0, "", nil, fmt.Errorf("-period=%s: want day, month or total", a.period)
	}
	if a.rpm < 0 || a.tpm < 0 || a.concurrency < 0 {
		return 0, "", nil, fmt.Errorf("-rpm, -tpm and -concurrency must not be negative")
	}
	for _, m := range strings.Split(a.models, ",") {
		if m = strings.TrimSpace(m); m != "" {
			models = append(models, m)
		}
	}
	return micros, period, models, nil
}

// parseDollars reads an amount of US dollars ("5", "0.25", "$12.50") as
// micro-dollars, exactly: at most six decimals, never negative.
func parseDollars(s string) (int64, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "$")
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" && frac == "" || len(frac) > 6 || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("want dollars like 5, 0.25 or 12.50 (at most six decimals)")
	}
	if whole == "" {
		whole = "0"
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > 1<<40 {
		return 0, fmt.Errorf("want dollars like 5, 0.25 or 12.50 (at most six decimals)")
	}
	f := int64(0)
	if frac != "" {
		if f, err = strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64); err != nil || f < 0 {
			return 0, fmt.Errorf("want dollars like 5, 0.25 or 12.50 (at most six decimals)")
		}
	}
	return w*1e6 + f, nil
}

// allowanceCells words an allowance for a table row: budget, period,
// rpm, tpm, concurrency, models.
func allowanceCells(budget int64, period string, rpm int, tpm int64, concurrency int, models []string) []string {
	dash := func(n int64) string {
		if n == 0 {
			return "-"
		}
		return strconv.FormatInt(n, 10)
	}
	b, p := "-", "-"
	if budget > 0 {
		b, p = formatMicros(budget), period
		if p == "" {
			p = "total"
		}
	}
	m := strings.Join(models, ",")
	if m == "" {
		m = "all"
	}
	return []string{b, p, dash(int64(rpm)), dash(tpm), dash(int64(concurrency)), m}
}

// formatCreated words a creation time for a table.
func formatCreated(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04")
}
