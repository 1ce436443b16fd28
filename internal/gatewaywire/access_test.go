package gatewaywire

import (
	"fmt"
	"testing"
	"time"
)

// A charge counts in its session's, day's, key's and tenant's scopes,
// each over its life and in the day and month it fell on; the counters
// say the same as summing the charges that are In each scope.
func TestScopes(t *testing.T) {
	charges := []Charge{
		{Request: "1", Session: "ci/a", Key: "ci", Tenant: "acme", Day: "2026-11-30", Model: "small", Micros: 10},
		{Request: "2", Session: "ci/b", Key: "ci", Tenant: "acme", Day: "2026-12-01", Model: "big", Micros: 20},
		{Request: "3", Session: "ops", Key: "ops", Tenant: "acme", Day: "2026-12-01", Model: "small", Micros: 40},
		{Request: "4", Session: "w", Day: "2026-12-01", Model: "small", Micros: 80},
	}
	var c Counters
	for _, ch := range charges {
		c.Apply(ch)
	}
	scopes := []struct {
		s    Scope
		want int64
	}{
		{Scope{Kind: ScopeSession, Name: "ci/a"}, 10},
		{Scope{Kind: ScopeDay, Name: "2026-12-01"}, 140},
		{Scope{Kind: ScopeKey, Name: "ci"}, 30},
		{PeriodScope(ScopeKey, "ci", PeriodDay, "2026-12-01"), 20},
		{PeriodScope(ScopeKey, "ci", PeriodMonth, "2026-11-15"), 10},
		{PeriodScope(ScopeKey, "ci", PeriodMonth, "2026-12-31"), 20},
		{Scope{Kind: ScopeTenant, Name: "acme"}, 70},
		{PeriodScope(ScopeTenant, "acme", PeriodDay, "2026-12-01"), 60},
		{PeriodScope(ScopeTenant, "acme", PeriodMonth, "2026-12-02"), 60},
		{Scope{Kind: ScopeTenant, Name: "other"}, 0},
		{Scope{Kind: ScopeKey, Name: ""}, 0},
	}
	for _, tt := range scopes {
		t.Run(fmt.Sprintf("%s %s %s %s", tt.s.Kind, tt.s.Name, tt.s.Period, tt.s.Bucket), func(t *testing.T) {
			if got := c.SpentIn(tt.s); got != tt.want {
				t.Fatalf("SpentIn = %d, want %d", got, tt.want)
			}
			var sum int64
			for _, ch := range charges {
				if ch.In(tt.s) {
					sum += ch.Micros
				}
			}
			if sum != tt.want {
				t.Fatalf("the charges In it sum to %d, want %d", sum, tt.want)
			}
		})
	}
	if m := c.KeyAccounts["ci"].Models; m["small"].Micros != 10 || m["big"].Micros != 20 {
		t.Fatalf("ci's models %+v", m)
	}
	d := c.Clone()
	d.Apply(Charge{Session: "x", Key: "ci", Tenant: "acme", Day: "2026-12-01", Model: "small", Micros: 1})
	if c.KeyAccounts["ci"].Days["2026-12-01"].Micros != 20 || c.Tenants["acme"].Models["small"].Micros != 50 {
		t.Fatal("a clone shares its accounts with the original")
	}
}

// An account keeps its newest days and months: the oldest go first.
func TestAccountRetention(t *testing.T) {
	var c Counters
	day := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range MaxAccountDays + 40 {
		c.Apply(Charge{Key: "k", Day: day.AddDate(0, 0, i).Format(time.DateOnly), Micros: 1})
	}
	for i := range MaxAccountMonths + 3 {
		c.Apply(Charge{Key: "k", Day: day.AddDate(0, i+6, 0).Format(time.DateOnly), Micros: 1})
	}
	a := c.KeyAccounts["k"]
	if len(a.Days) != MaxAccountDays || len(a.Months) != MaxAccountMonths {
		t.Fatalf("%d days and %d months kept, want %d and %d", len(a.Days), len(a.Months), MaxAccountDays, MaxAccountMonths)
	}
	if _, ok := a.Days["2026-01-01"]; ok {
		t.Fatal("the oldest day is still kept")
	}
	if a.Total.Micros != int64(MaxAccountDays+40+MaxAccountMonths+3) || c.Keys["k"] != a.Total {
		t.Fatalf("total %+v, key %+v", a.Total, c.Keys["k"])
	}
}

func TestAllowancePatch(t *testing.T) {
	a := Allowance{BudgetMicros: 5, Period: PeriodDay, Limits: Limits{RPM: 3}, Models: []string{"a"}}
	rpm, models := 0, []string{}
	got := AllowancePatch{RPM: &rpm, Models: &models}.Apply(a)
	if got.BudgetMicros != 5 || got.Period != PeriodDay || got.RPM != 0 || len(got.Models) != 0 || !got.Allows("b") {
		t.Fatalf("patched %+v", got)
	}
	if err := (Allowance{Period: "week"}).Check(); err == nil {
		t.Fatal("a weekly period was taken")
	}
	if err := (Allowance{Limits: Limits{TPM: -1}}).Check(); err == nil {
		t.Fatal("a negative TPM was taken")
	}
}
