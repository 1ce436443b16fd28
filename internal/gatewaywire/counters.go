package gatewaywire

// Counters are the cost counters: per session, per calendar day and in
// total, in micro-dollars, with the tokens behind them.
type Counters struct {
	Sessions map[string]Tally `json:"sessions"`
	// Keys are the API keys' counters, by the key's name.
	Keys  map[string]Tally `json:"keys,omitempty"`
	Days  map[string]Tally `json:"days"`
	Total Tally            `json:"total"`
}

// Tally is one counter: its cost, its calls and their tokens.
type Tally struct {
	Micros int64 `json:"micros"`
	Calls  int64 `json:"calls"`
	Usage  Usage `json:"usage"`
}

// Charge is one answer's cost, as the ledger records it.
type Charge struct {
	// Request names the call (its idempotency key): a charge recorded
	// twice for one request counts once.
	Request string `json:"request"`
	Session string `json:"session"`
	// Key is the name of the API key the call came with ("" for calls
	// from workers and from a gateway without keys).
	Key        string `json:"key,omitempty"`
	Day        string `json:"day"`
	Model      string `json:"model"`
	Deployment string `json:"deployment"`
	Usage      Usage  `json:"usage"`
	Micros     int64  `json:"micros"`
}

// Spend is what a call's payers have spent, in micro-dollars.
type Spend struct {
	Session, Day, Key int64
}

// Apply adds a charge to the counters. It counts every charge it is given:
// skipping a request already charged is the caller's work (MemLedger's
// seen set in internal/gateway, the ledgers' batch marks in the maps).
func (c *Counters) Apply(ch Charge) {
	if c.Sessions == nil {
		c.Sessions = map[string]Tally{}
	}
	if c.Days == nil {
		c.Days = map[string]Tally{}
	}
	add := func(t Tally) Tally {
		t.Micros += ch.Micros
		t.Calls++
		t.Usage = t.Usage.Add(ch.Usage)
		return t
	}
	c.Sessions[ch.Session] = add(c.Sessions[ch.Session])
	if ch.Key != "" {
		if c.Keys == nil {
			c.Keys = map[string]Tally{}
		}
		c.Keys[ch.Key] = add(c.Keys[ch.Key])
	}
	c.Days[ch.Day] = add(c.Days[ch.Day])
	c.Total = add(c.Total)
}

// Spent returns what session, day and key have spent.
func (c *Counters) Spent(session, day, key string) Spend {
	s := Spend{Session: c.Sessions[session].Micros, Day: c.Days[day].Micros}
	if key != "" {
		s.Key = c.Keys[key].Micros
	}
	return s
}

// Add adds the charges to the spend of session, day and key.
func (s Spend) Add(session, day, key string, charges ...Charge) Spend {
	for _, c := range charges {
		if c.Session == session {
			s.Session += c.Micros
		}
		if c.Day == day {
			s.Day += c.Micros
		}
		if key != "" && c.Key == key {
			s.Key += c.Micros
		}
	}
	return s
}

// Clone returns a deep copy.
func (c *Counters) Clone() Counters {
	out := Counters{Sessions: make(map[string]Tally, len(c.Sessions)), Days: make(map[string]Tally, len(c.Days)), Total: c.Total}
	for k, v := range c.Sessions {
		out.Sessions[k] = v
	}
	for k, v := range c.Days {
		out.Days[k] = v
	}
	if c.Keys != nil {
		out.Keys = make(map[string]Tally, len(c.Keys))
		for k, v := range c.Keys {
			out.Keys[k] = v
		}
	}
	return out
}
