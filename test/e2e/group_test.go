package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/cli"

	"github.com/stickyd/stickyd/internal/agent"
	"github.com/stickyd/stickyd/internal/command"
)

// stickyd runs the real command line against the agent's admin API.
func stickyd(t *testing.T, a *agent.Agent, args ...string) (int, string) {
	t.Helper()
	ui := cli.NewMockUi()
	args = append(args, "-address", "http://"+a.AdminAddr(), "-token", testToken)
	code := command.RunWith(args, ui, nil)
	return code, ui.OutputWriter.String() + ui.ErrorWriter.String()
}

// groupOf is the group of the worker holding user.
func groupOf(a *agent.Agent, user string) string {
	u, _ := a.Supervisor().User(user)
	return a.Pool().GroupOf(u.Worker)
}

func waitGroupReady(t *testing.T, a *agent.Agent, group string, n int) {
	t.Helper()
	waitFor(t, 60*time.Second, "group "+group+" ready", func() bool {
		c := 0
		for _, w := range a.Pool().Ready() {
			if a.Pool().GroupOf(w) == group {
				c++
			}
		}
		return c == n
	})
}

// A release is a promotion: everyone typing on group v1 moves to v2 with no
// failed request and no lost delta, newcomers land on v2, and a rollback
// brings everyone back with their sessions; the emptied group is retired.
// Everything goes through the real CLI and admin API.
func TestPromoteAndRollback(t *testing.T) {
	users := envInt("STICKYD_PROMOTE_USERS", 200)
	if raceEnabled {
		users = envInt("STICKYD_PROMOTE_USERS", 60)
	}
	// Bundle A and bundle B: two releases of the counter worker.
	archive, ds := packBundles(t, "counter", "counter/cmd/counter-worker", nil, nil)
	a := startAgentWith(t, "subprocess", 2, withDataDir(t), func(c *agent.Config) {
		c.Bundles = &agent.BundlesConfig{Archive: archive}
		c.Groups[0] = &agent.GroupConfig{Name: "v1", Workers: 2, Bundle: ds[0]}
		c.Front.BarrierWait = "30s"
	})
	browsers := make([]*browser, users)
	tabs := make([]*tab, users)
	for i := range tabs {
		browsers[i] = newBrowser(t, a)
		if code, body := browsers[i].do("POST", "/login?user=p"+strconv.Itoa(i)); code != 200 {
			t.Fatalf("login: %d %s", code, body)
		}
		tabs[i] = browsers[i].openTab("typing")
		tabs[i].pull(0)
	}
	if code, out := stickyd(t, a, "group", "create", "-bundle", ds[1], "-workers", "2", "v2"); code != 0 {
		t.Fatalf("group create: %d %s", code, out)
	}
	if code, out := stickyd(t, a, "group", "create", "-bundle", ds[1], "v2"); code != 1 || !strings.Contains(out, "exists") {
		t.Fatalf("creating v2 twice: %d %s", code, out)
	}
	waitGroupReady(t, a, "v2", 2)

	ty := startTypists(tabs)
	time.Sleep(200 * time.Millisecond)
	code, out := stickyd(t, a, "group", "promote", "v2", "-parallel", "16")
	if code != 0 || !strings.Contains(out, "promoting v2: "+strconv.Itoa(users)+" of "+strconv.Itoa(users)+" people moved, 0 failed") {
		t.Fatalf("promote: %d\n%s", code, tail(out))
	}
	for i := range users {
		if g := groupOf(a, "p"+strconv.Itoa(i)); g != "v2" {
			t.Fatalf("p%d is in %s after the promotion", i, g)
		}
	}
	newcomer := newBrowser(t, a)
	newcomer.do("GET", "/")
	if w := newcomer.whoami().Worker; a.Pool().GroupOf(w) != "v2" {
		t.Fatalf("a newcomer after the promotion landed on %s", w)
	}

	time.Sleep(200 * time.Millisecond)
	code, out = stickyd(t, a, "group", "rollback", "-parallel", "16")
	if code != 0 || !strings.Contains(out, "failed") || !strings.Contains(out, ", 0 failed") {
		t.Fatalf("rollback: %d\n%s", code, tail(out))
	}
	typed, err := ty.stop()
	if err != nil {
		t.Fatal(err)
	}
	for i := range users {
		if g := groupOf(a, "p"+strconv.Itoa(i)); g != "v1" {
			t.Fatalf("p%d is in %s after the rollback", i, g)
		}
		if w := browsers[i].whoami(); w.User != "p"+strconv.Itoa(i) {
			t.Fatalf("p%d lost their session: %+v", i, w)
		}
	}
	notes := checkTyped(t, tabs, typed)
	t.Logf("%d people typed %d notes through a promotion and a rollback", users, notes)

	code, out = stickyd(t, a, "group", "status", "v2")
	if code != 0 || !strings.Contains(out, "promote") || !strings.Contains(out, "rollback") {
		t.Fatalf("group status: %d %s", code, out)
	}
	// v2 is empty now: it can be retired, and its workers stop.
	code, out = stickyd(t, a, "group", "retire", "v2")
	if code != 0 {
		t.Fatalf("group retire: %d %s", code, out)
	}
	waitGroupReady(t, a, "v2", 0)
	if code, out := stickyd(t, a, "group", "retire", "v1"); code != 1 || !strings.Contains(out, "catalog") {
		t.Fatalf("retiring a configured group: %d %s", code, out)
	}
}

// A canary: one person sent ahead by a rule lands on the canary group and
// comes back when the rule goes; a team matched by a login attribute goes
// too; everyone else stays.
func TestCanaryRule(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	a := startAgentWith(t, "subprocess", 1, withDataDir(t), func(c *agent.Config) { c.Groups[0].Name = "stable" })
	tabs := map[string]*tab{}
	for _, u := range []string{"maria", "ana", "ben"} {
		b := newBrowser(t, a)
		b.do("POST", "/login?user="+u)
		tb := b.openTab("p")
		tb.send(map[string]any{"op": "inc"})
		tabs[u] = tb
	}
	if code, out := stickyd(t, a, "group", "create", "-command", exe, "-env", workerEnv+"=counter", "canary"); code != 0 {
		t.Fatalf("group create: %d %s", code, out)
	}
	waitGroupReady(t, a, "canary", 1)
	code, out := stickyd(t, a, "group", "assign", "-user", "maria", "canary")
	if code != 0 || !strings.Contains(out, "1 of 1 people moved") {
		t.Fatalf("assign: %d %s", code, out)
	}
	if g := groupOf(a, "maria"); g != "canary" {
		t.Fatalf("maria is in %s", g)
	}
	for _, u := range []string{"ana", "ben"} {
		if g := groupOf(a, u); g != "stable" {
			t.Fatalf("%s moved to %s", u, g)
		}
	}
	// A team by attribute: who logs in as team=qa goes to the canary.
	if code, out := stickyd(t, a, "group", "assign", "-attr", "team=qa", "canary"); code != 0 {
		t.Fatalf("assign by attribute: %d %s", code, out)
	}
	qa := newBrowser(t, a)
	qa.do("POST", "/login?user=quinn&team=qa")
	waitFor(t, 10*time.Second, "quinn in the canary", func() bool { return groupOf(a, "quinn") == "canary" })
	code, out = stickyd(t, a, "group", "list")
	if code != 0 || !strings.Contains(out, "maria-canary") || !strings.Contains(out, "team=qa") || !strings.Contains(out, "stable*") {
		t.Fatalf("group list: %d %s", code, out)
	}
	// The rule goes: maria comes back, with her page.
	if code, out := stickyd(t, a, "group", "unassign", "maria-canary"); code != 0 || !strings.Contains(out, "1 of 1 people moved") {
		t.Fatalf("unassign: %d %s", code, out)
	}
	if g := groupOf(a, "maria"); g != "stable" {
		t.Fatalf("maria is in %s after the rule went", g)
	}
	tabs["maria"].send(map[string]any{"op": "inc"})
	tabs["maria"].drainUntil("count", 2)
	if g := groupOf(a, "quinn"); g != "canary" {
		t.Fatalf("quinn left the canary with the other rule: %s", g)
	}
	// The canary cannot be retired while a rule sends people there.
	if code, out := stickyd(t, a, "group", "retire", "canary"); code != 1 || !strings.Contains(out, "in use") {
		t.Fatalf("retiring a group in use: %d %s", code, out)
	}
}

// tail keeps the last lines of a long output.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}
