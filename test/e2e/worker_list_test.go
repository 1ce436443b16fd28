package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// workerListUsers reads `stickyd worker list`'s table: each worker's USERS
// (the maps' people on it) and HELD (those its last probe held; -1 for
// "-"), and the whole output.
func workerListUsers(t *testing.T, admin string) (users, held map[string]int, out string) {
	t.Helper()
	out, code := runCLI(t, admin, "worker", "list")
	if code != 0 {
		t.Fatalf("worker list: exit %d: %s", code, out)
	}
	users, held = map[string]int{}, map[string]int{}
	var header []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			if header != nil {
				break // the table ends at the first blank line
			}
			continue
		}
		if f[0] == "ID" {
			header = f
			continue
		}
		if header == nil || len(f) != len(header) {
			continue
		}
		for i, h := range header {
			switch h {
			case "USERS":
				users[f[0]], _ = strconv.Atoi(f[i])
			case "HELD":
				n, err := strconv.Atoi(f[i])
				if err != nil {
					n = -1
				}
				held[f[0]] = n
			}
		}
	}
	if header == nil || !strings.Contains(strings.Join(header, " "), "USERS HELD") {
		t.Fatalf("worker list has no USERS and HELD columns:\n%s", out)
	}
	return users, held, out
}

// userListCount counts the rows of `stickyd user list -all` with args.
func userListCount(t *testing.T, admin string, args ...string) int {
	t.Helper()
	out, code := runCLI(t, admin, append([]string{"user", "list", "-all"}, args...)...)
	if code != 0 {
		t.Fatalf("user list %v: exit %d: %s", args, code, out)
	}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "p") && f[0] != "USER" {
			n++
		}
	}
	return n
}

// After a drain, the people moved off the drained worker are parked on
// their new one, not in its memory until their next request: worker list
// counts them where the maps place them (USERS), as user list does, and
// says how many are parked; once they speak, the worker holds them too.
func TestWorkerListAgreesWithUserListAfterADrain(t *testing.T) {
	waits(t)
	a := startAgent(t, "inprocess", 2)
	admin := a.AdminAddr()
	tabs := map[string]*tab{}
	homes := map[string]string{}
	for i := range 4 {
		user := fmt.Sprintf("p%d", i)
		_, tb, home := countingPerson(t, a, user)
		tabs[user], homes[user] = tb, home
	}
	// Drain the worker with the most people (someone is on it).
	count := map[string]int{}
	for _, w := range homes {
		count[w]++
	}
	drained := ""
	for w, n := range count {
		if drained == "" || n > count[drained] || n == count[drained] && w < drained {
			drained = w
		}
	}
	if out, code := runCLI(t, admin, "worker", "drain", drained); code != 0 {
		t.Fatalf("worker drain %s: exit %d: %s", drained, code, out)
	}
	agree := func(what string, parked bool) {
		t.Helper()
		var last string
		deadline := time.Now().Add(15 * time.Second)
		for {
			users, held, out := workerListUsers(t, admin)
			last = out
			ok := userListCount(t, admin) == len(tabs)
			total := 0
			for w, n := range users {
				total += n
				ok = ok && n == userListCount(t, admin, "-worker", w) && held[w] >= 0
				if !parked {
					ok = ok && held[w] == n // every one of its people in its memory
				}
			}
			ok = ok && total == len(tabs) && users[drained] == 0
			ok = ok && strings.Contains(out, "Parked, not held yet: "+strconv.Itoa(count[drained])) == parked
			if ok {
				t.Logf("%s:\n%s", what, out)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: worker list and user list disagree:\n%s", what, last)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	agree("after the drain, the moved people parked", true)
	// The moved people speak: their new worker wakes and holds them.
	for user, tb := range tabs {
		if homes[user] == drained {
			sendRetrying(t, tb, map[string]any{"op": "inc"})
		}
	}
	agree("after the moved people spoke", false)
}
