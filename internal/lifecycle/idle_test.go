package lifecycle

import (
	"testing"
	"time"
)

func TestIdleParkOfAGroup(t *testing.T) {
	p := NewIdleParker(IdleConfig{Idle: 15 * time.Minute, Groups: map[string]time.Duration{"batch": 0, "fast": 2 * time.Second}})
	if p.idleOf("web") != 15*time.Minute || p.idleOf("batch") != 0 || p.idleOf("fast") != 2*time.Second {
		t.Fatalf("idle of web %v, batch %v, fast %v", p.idleOf("web"), p.idleOf("batch"), p.idleOf("fast"))
	}
	if p.every() != 500*time.Millisecond {
		t.Fatalf("looks every %v, want a quarter of the shortest (500ms)", p.every())
	}
}

// The parker is on if the agent's idle_park or any group's is.
func TestIdleParkOn(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    IdleConfig
		wantOn bool
	}{
		{"default", IdleConfig{Idle: 15 * time.Minute}, true},
		{"off", IdleConfig{}, false},
		{"off but a group", IdleConfig{Groups: map[string]time.Duration{"fast": time.Second}}, true},
		{"on but every group off", IdleConfig{Idle: time.Minute, Groups: map[string]time.Duration{"web": 0}}, true},
		{"off and groups off", IdleConfig{Groups: map[string]time.Duration{"web": 0}}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := NewIdleParker(c.cfg).On(); got != c.wantOn {
				t.Fatalf("on %v, want %v", got, c.wantOn)
			}
		})
	}
}
