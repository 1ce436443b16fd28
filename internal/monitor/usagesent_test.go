package monitor

import (
	"maps"
	"slices"
	"testing"
)

// An ask for changes with the last token gets only the people whose totals
// moved and those gone; any other token gets everyone. Merged as the
// leader merges them, the changes rebuild the whole usage.
func TestUsageChangesSinceTheLastAnswer(t *testing.T) {
	var s usageSent
	usage := map[string]Person{
		"ann": {User: "ann", Worker: "w1", BusySeconds: 1, StateBytes: 100},
		"bob": {User: "bob", Worker: "w1", BusySeconds: 2, StateBytes: 200},
		"cat": {User: "cat", Worker: "w2", BusySeconds: 3, StateBytes: 300},
	}
	first := Part{Usage: maps.Clone(usage)}
	s.changes(&first, "")
	if first.Changes || len(first.Usage) != 3 || first.Token == "" {
		t.Fatalf("first answer: %+v", first)
	}
	kept := maps.Clone(first.Usage)

	usage["bob"] = Person{User: "bob", Worker: "w1", BusySeconds: 2.5, StateBytes: 900}
	delete(usage, "cat")
	usage["dan"] = Person{User: "dan", Worker: "w2"}
	second := Part{Usage: maps.Clone(usage)}
	s.changes(&second, first.Token)
	if !second.Changes || second.Token == first.Token {
		t.Fatalf("second answer is not changes: %+v", second)
	}
	if got := slices.Sorted(maps.Keys(second.Usage)); !slices.Equal(got, []string{"bob", "dan"}) || !slices.Equal(second.Gone, []string{"cat"}) {
		t.Fatalf("changes %v, gone %v; want bob and dan, cat gone", got, second.Gone)
	}
	maps.Copy(kept, second.Usage)
	for _, u := range second.Gone {
		delete(kept, u)
	}
	if !maps.Equal(kept, usage) {
		t.Fatalf("merged %v, want %v", kept, usage)
	}

	// An old token (an answer lost on the way, a new leader): everyone.
	third := Part{Usage: maps.Clone(usage)}
	s.changes(&third, first.Token)
	if third.Changes || len(third.Usage) != len(usage) || len(third.Gone) != 0 {
		t.Fatalf("an old token got %+v, want everyone", third)
	}
}
