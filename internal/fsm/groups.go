package fsm

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
)

// Groups, the default group and the assignment rules are replicated with the
// maps: every agent runs the groups of the catalog, and every server answers
// "which group is this person's" the same way.

// GroupEntry is a group's recipe as the cluster records it. A group created
// in an agent's HCL file is local to that agent and is not recorded here.
type GroupEntry struct {
	Name string `json:"name"`
	// Runtime is what runs the workers: "go-plugin" (Bundle's entry point
	// or Command), "builtin" (an application compiled into stickyd) or
	// "python3" (Command is a WSGI application, MODULE:CALLABLE, run by
	// stickyd's Python worker).
	Runtime string `json:"runtime"`
	// Interpreter is the Python of a "python3" group ("": the system's).
	Interpreter string `json:"interpreter,omitempty"`
	// Bundle is the digest of the application bundle ("sha256:…").
	Bundle  string   `json:"bundle,omitempty"`
	Command string   `json:"command,omitempty"`
	Args    []string `json:"args,omitempty"`
	Builtin string   `json:"builtin,omitempty"`
	// Env is added to the workers' environment.
	Env map[string]string `json:"env,omitempty"`
	// Workers is how many workers each agent runs for the group.
	Workers int `json:"workers"`
	// MemoryMaxMB is a worker's hard memory ceiling (0: none).
	MemoryMaxMB int `json:"memory_max_mb,omitempty"`
	// Limits bound its people's pages (nil: the SDK's defaults).
	Limits *GroupLimits `json:"limits,omitempty"`
	// Governance is the group's governance block, as the agent's HCL
	// configuration spells it, in JSON (the agent decodes it).
	Governance json.RawMessage `json:"governance,omitempty"`
	// Created is the log index that created the group.
	Created uint64 `json:"created"`
}

// GroupLimits bound a group's people's pages in its workers; 0 leaves the
// SDK's default.
type GroupLimits struct {
	MaxPageBytes      int64 `json:"max_page_bytes,omitempty"`
	MaxPersonBytes    int64 `json:"max_person_bytes,omitempty"`
	MaxPagesPerConn   int32 `json:"max_pages_per_conn,omitempty"`
	MaxPagesPerPerson int32 `json:"max_pages_per_person,omitempty"`
}

// Rule sends people to a group: a person named User, or everyone whose login
// attribute Attr equals Value. The first matching rule wins; people no rule
// matches belong to the default group.
type Rule struct {
	ID    string `json:"id"`
	Group string `json:"group"`
	User  string `json:"user,omitempty"`
	Attr  string `json:"attr,omitempty"`
	Value string `json:"value,omitempty"`
}

// Matches reports whether the rule sends user (with attrs) to its group.
func (r Rule) Matches(user string, attrs map[string]string) bool {
	if r.User != "" {
		return r.User == user
	}
	v, ok := attrs[r.Attr]
	return ok && v == r.Value
}

// Group catalog entry types.
const (
	// GroupPutRequestType creates or replaces a GroupEntry.
	GroupPutRequestType MessageType = 8
	// GroupDeleteRequestType removes a group (GroupDeleteRequest).
	GroupDeleteRequestType MessageType = 9
	// SetDefaultRequestType names the default group (SetDefaultRequest).
	SetDefaultRequestType MessageType = 10
	// RulePutRequestType adds or replaces a Rule.
	RulePutRequestType MessageType = 11
	// RuleDeleteRequestType removes a rule (RuleDeleteRequest).
	RuleDeleteRequestType MessageType = 12
)

// ErrGroupInUse is returned when removing a group that is the default or
// that a rule sends people to.
var ErrGroupInUse = errors.New("group is in use")

// GroupDeleteRequest removes a group from the catalog.
type GroupDeleteRequest struct {
	Name string `json:"name"`
}

// SetDefaultRequest makes Group the default; the group it replaces is kept as
// the previous default, where a rollback returns.
type SetDefaultRequest struct {
	Group string `json:"group"`
}

// RuleDeleteRequest removes a rule.
type RuleDeleteRequest struct {
	ID string `json:"id"`
}

// Catalog is the replicated group state.
type Catalog struct {
	Groups   map[string]*GroupEntry `json:"groups,omitempty"`
	Default  string                 `json:"default,omitempty"`
	Previous string                 `json:"previous,omitempty"`
	Rules    []Rule                 `json:"rules,omitempty"`
}

func (c *Catalog) clone() Catalog {
	out := Catalog{Groups: make(map[string]*GroupEntry, len(c.Groups)), Default: c.Default, Previous: c.Previous,
		Rules: append([]Rule(nil), c.Rules...)}
	for k, v := range c.Groups {
		g := *v
		out.Groups[k] = &g
	}
	return out
}

// Catalog returns a copy of the groups, default and rules.
func (f *FSM) Catalog() Catalog {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.state.Catalog.clone()
}

// WatchCatalog returns a channel closed at the next change of the catalog.
func (f *FSM) WatchCatalog() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.catalogCh == nil {
		f.catalogCh = make(chan struct{})
	}
	return f.catalogCh
}

func (f *FSM) catalogChangedLocked() {
	f.changes.everyoneLocked()
	if f.catalogCh != nil {
		close(f.catalogCh)
		f.catalogCh = nil
	}
}

// Attrs returns the login attributes recorded for user.
func (f *FSM) Attrs(user string) map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if h, ok := f.state.Users.get(user); ok {
		return h.Attrs
	}
	return nil
}

// Assigned returns the group a rule sends user to, and the rule; ok is false
// when no rule matches (the person belongs to the default group).
func (f *FSM) Assigned(user string) (group string, rule Rule, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	var attrs map[string]string
	if h, ok := f.state.Users.get(user); ok {
		attrs = h.Attrs
	}
	for _, r := range f.state.Catalog.Rules {
		if r.Matches(user, attrs) {
			return r.Group, r, true
		}
	}
	return "", Rule{}, false
}

func (f *FSM) applyGroupPut(buf body, index uint64) interface{} {
	var g GroupEntry
	if err := buf.decode(&g); err != nil {
		return fmt.Errorf("decoding group: %w", err)
	}
	if g.Name == "" {
		return errors.New("a group needs a name")
	}
	if old := f.state.Catalog.Groups[g.Name]; old != nil {
		g.Created = old.Created
	} else {
		g.Created = index
	}
	if f.state.Catalog.Groups == nil {
		f.state.Catalog.Groups = map[string]*GroupEntry{}
	}
	f.state.Catalog.Groups[g.Name] = &g
	f.catalogChangedLocked()
	return nil
}

func (f *FSM) applyGroupDelete(buf body) interface{} {
	var req GroupDeleteRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding group removal: %w", err)
	}
	c := &f.state.Catalog
	if c.Default == req.Name {
		return fmt.Errorf("removing group %q: %w: it is the default group", req.Name, ErrGroupInUse)
	}
	for _, r := range c.Rules {
		if r.Group == req.Name {
			return fmt.Errorf("removing group %q: %w: rule %s sends people there", req.Name, ErrGroupInUse, r.ID)
		}
	}
	delete(c.Groups, req.Name)
	if c.Previous == req.Name {
		c.Previous = ""
	}
	f.catalogChangedLocked()
	return nil
}

func (f *FSM) applySetDefault(buf body) interface{} {
	var req SetDefaultRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding default group: %w", err)
	}
	c := &f.state.Catalog
	if c.Default != req.Group {
		c.Previous, c.Default = c.Default, req.Group
	}
	f.catalogChangedLocked()
	return nil
}

func (f *FSM) applyRulePut(buf body) interface{} {
	var r Rule
	if err := buf.decode(&r); err != nil {
		return fmt.Errorf("decoding rule: %w", err)
	}
	if r.ID == "" || r.Group == "" || (r.User == "") == (r.Attr == "") {
		return errors.New("a rule needs an id, a group, and a user or an attribute")
	}
	c := &f.state.Catalog
	replaced := false
	for i := range c.Rules {
		if c.Rules[i].ID == r.ID {
			c.Rules[i], replaced = r, true
		}
	}
	if !replaced {
		c.Rules = append(c.Rules, r)
	}
	f.catalogChangedLocked()
	return nil
}

func (f *FSM) applyRuleDelete(buf body) interface{} {
	var req RuleDeleteRequest
	if err := buf.decode(&req); err != nil {
		return fmt.Errorf("decoding rule removal: %w", err)
	}
	c := &f.state.Catalog
	for i, r := range c.Rules {
		if r.ID == req.ID {
			c.Rules = append(c.Rules[:i:i], c.Rules[i+1:]...)
			f.catalogChangedLocked()
			return nil
		}
	}
	return fmt.Errorf("no rule %q", req.ID)
}

// GroupNames lists the catalog's groups, sorted.
func (c Catalog) GroupNames() []string {
	out := make([]string, 0, len(c.Groups))
	for n := range c.Groups {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
