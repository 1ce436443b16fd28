package e2e

import (
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Every server of a three-server cluster stopped together (as an
// operator's `systemctl stop` across machines, or a job stop, does): two
// of them first, together, then the third, which has no quorum left to
// write the maps: after 3 s without a leader it parks its people by
// itself (frozen, packages written, named in its park folder as parked
// offline) instead of waiting out its shutdown_timeout and losing them.
// Every person comes back after the three start again, with their login
// and their page whole, without a notice.
func TestServersStoppedTogether(t *testing.T) {
	const perServer = 200
	ps := startThreeServers(t, "shutdown_timeout = \"20s\"\n")
	waitFor(t, 30*time.Second, "a leader", func() bool {
		s, ok := status(t, ps[0])
		return ok && s.Leader != "" && len(s.Members) == 3
	})
	type person struct {
		p    *proc
		name string
		tb   *tab
	}
	var people []person
	for i, p := range ps {
		for k := range perServer {
			b := procBrowser(t, p)
			name := "t" + strconv.Itoa(i) + "x" + strconv.Itoa(k)
			if code, body := b.do("POST", "/login?user="+name); code != 200 {
				t.Fatalf("login of %s on s%d: %d %s", name, i+1, code, body)
			}
			tb := b.openTab("p")
			tb.send(map[string]any{"op": "inc"})
			tb.send(map[string]any{"op": "inc"})
			people = append(people, person{p, name, tb})
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(ps))
	for i, p := range ps[:2] {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = p.stop(syscall.SIGTERM) }()
	}
	wg.Wait()
	began := time.Now()
	errs[2] = ps[2].stop(syscall.SIGTERM)
	t.Logf("the last server stopped in %v with no quorum", time.Since(began).Round(time.Millisecond))
	for i, err := range errs {
		if err != nil {
			t.Errorf("s%d's stop: %v\n%s", i+1, err, ps[i].out)
		}
	}
	for _, x := range people {
		x.tb.ws.Close()
	}
	for _, p := range ps {
		p.launch()
	}
	for _, p := range ps {
		p.waitHealthy()
	}
	if rep := ps[2].health().Restart; rep.Offline != perServer || rep.Missing != 0 {
		t.Errorf("the last server's restart report %+v: want its %d people parked offline", rep, perServer)
	}
	for _, x := range people {
		if w := x.tb.b.whoami(); w.User != x.name {
			t.Fatalf("%s is %+v after the restart", x.name, w)
		}
		ans := x.tb.connect()
		if ans.Opened.Notice != "" {
			t.Errorf("%s's page came back with a notice: %q", x.name, ans.Opened.Notice)
		}
		x.tb.drainUntil("count", 2)
	}
}
