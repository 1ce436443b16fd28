package cluster

import (
	"github.com/stickyd/stickyd/internal/gateway"
	"github.com/stickyd/stickyd/internal/gatewaywire"
)

// chargeSums adds up charges by everything a budget's scope counts them
// by (gatewaywire's Charge.In), so that what the charges not yet in the
// log spend in a scope is read in one look, not by walking them: the
// ledger keeps one for its pending charges and one for the batch in the
// log's hands. An entry that comes back to zero leaves its map.
type chargeSums struct {
	session, day, key, tenant                map[string]int64
	keyDay, keyMonth, tenantDay, tenantMonth map[[2]string]int64
}

// add counts c (sign 1) or takes it back (sign -1).
func (s *chargeSums) add(c *gateway.Charge, sign int64) {
	if s.session == nil {
		s.session, s.day, s.key, s.tenant = map[string]int64{}, map[string]int64{}, map[string]int64{}, map[string]int64{}
		s.keyDay, s.keyMonth, s.tenantDay, s.tenantMonth = map[[2]string]int64{}, map[[2]string]int64{}, map[[2]string]int64{}, map[[2]string]int64{}
	}
	v := sign * c.Micros
	bump(s.session, c.Session, v)
	bump(s.day, c.Day, v)
	month := gatewaywire.MonthOf(c.Day)
	if c.Key != "" {
		bump(s.key, c.Key, v)
		bump(s.keyDay, [2]string{c.Key, c.Day}, v)
		bump(s.keyMonth, [2]string{c.Key, month}, v)
	}
	if c.Tenant != "" {
		bump(s.tenant, c.Tenant, v)
		bump(s.tenantDay, [2]string{c.Tenant, c.Day}, v)
		bump(s.tenantMonth, [2]string{c.Tenant, month}, v)
	}
}

func bump[K comparable](m map[K]int64, k K, v int64) {
	if n := m[k] + v; n != 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}

// in is what the charges counted spend in scope sc.
func (s *chargeSums) in(sc gateway.Scope) int64 {
	if s.session == nil {
		return 0
	}
	switch sc.Kind {
	case gatewaywire.ScopeSession:
		return s.session[sc.Name]
	case gatewaywire.ScopeDay:
		return s.day[sc.Name]
	case gatewaywire.ScopeKey:
		return periodSum(sc, s.key, s.keyDay, s.keyMonth)
	case gatewaywire.ScopeTenant:
		return periodSum(sc, s.tenant, s.tenantDay, s.tenantMonth)
	}
	return 0
}

func periodSum(sc gateway.Scope, all map[string]int64, byDay, byMonth map[[2]string]int64) int64 {
	if sc.Name == "" {
		return 0
	}
	switch sc.Period {
	case gatewaywire.PeriodDay:
		return byDay[[2]string{sc.Name, sc.Bucket}]
	case gatewaywire.PeriodMonth:
		return byMonth[[2]string{sc.Name, sc.Bucket}]
	}
	return all[sc.Name]
}
