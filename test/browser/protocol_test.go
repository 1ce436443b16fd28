package browser

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/stickyd/stickyd/internal/agent"
)

// A worker killed after its checkpoint: the page wakes on the replacement
// with its filter as of the checkpoint, and the person is told so, in the
// page (the RESET's notice reaches onNotice; client.js dropped it).
func TestCheckpointNoticeShown(t *testing.T) {
	t.Parallel()
	one := startBrowser(t, "one")
	a := startAgentWith(t, "subprocess", 2, func(c *agent.Config) { c.Groups[0].CheckpointInterval = "1s" })
	one.do("loading the demo", chromedp.Navigate("http://"+a.Addr()+"/"))
	v := one.waitView("the grid to go live", firstLoad, func(v view) bool {
		return v.GridStatus == "live" && workerID.MatchString(v.GridWorker) && v.total() == rowCount
	})
	home := v.GridWorker
	one.do("typing a filter", chromedp.SendKeys(chromedp.ID("f-text"), city), chromedp.Blur(chromedp.ID("f-text")))
	one.waitView("the grid to show only "+city, settle, func(v view) bool {
		return v.total() > 0 && v.total() < rowCount && allContain(v.Cities, city)
	})
	time.Sleep(3 * time.Second) // past two checkpoints
	killWorker(t, a, home)
	back := one.waitView("the checkpoint's notice, the filter kept", settle, func(v view) bool {
		return strings.Contains(v.Notice, "restored from its last checkpoint") && v.GridStatus == "live" && allContain(v.Cities, city)
	})
	t.Logf("after the kill: %s", back)
}

// A page on the long-poll fallback whose cookie no longer names a
// connection backs off (it hammered the front at 378–876 requests/s, all
// 401, while saying "polling") and tells the person.
func TestFallbackWithoutCookieBacksOff(t *testing.T) {
	t.Parallel()
	one := startBrowser(t, "one")
	a := startAgent(t, "inprocess", 1)
	one.do("loading the demo", chromedp.Navigate("http://"+a.Addr()+"/"))
	one.waitView("the grid to go live", firstLoad, func(v view) bool { return v.GridStatus == "live" })
	clear := func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, network.ClearBrowserCookies, cdp.Empty{})
		return chromedp.Void{}, err
	}
	one.do("dropping the cookie", clear)
	one.js("a polling page without a cookie", `
		window.__ops = 0; window.__notices = []; window.__statuses = [];
		const fetch0 = window.fetch;
		window.fetch = (u, o) => { if (String(u).endsWith("/_stickyd/op")) window.__ops++; return fetch0(u, o); };
		window.__page = stickyd.page({ kind: "grid", id: "lost-cookie", transport: "poll",
			onNotice: (n) => window.__notices.push(n), onStatus: (s) => window.__statuses.push(s) });`)
	time.Sleep(8 * time.Second)
	ops, err := eval[int](one, "window.__ops")
	if err != nil {
		t.Fatal(err)
	}
	status, _ := eval[string](one, "window.__page.status")
	notices, _ := eval[[]string](one, "window.__notices")
	if ops > 10 || status != "unauthorized" || len(notices) != 1 || !strings.Contains(notices[0], "reload") {
		t.Fatalf("in 8 s without a cookie: %d requests (at most ~1 a second wanted), status %q, notices %q", ops, status, notices)
	}
	t.Logf("8 s without a cookie: %d requests, status %q, notice %q", ops, status, notices[0])
}

// Two tabs on one page id (a duplicated tab copies sessionStorage): both
// write notes, each acknowledging deltas the other has not seen; both
// trees end with every note of both, never a silent divergence (a tab
// missed the notes the other acknowledged). The page client is imported as the served ES module.
func TestTwoTabsOnOnePageID(t *testing.T) {
	t.Parallel()
	one := startBrowser(t, "one")
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) {
		c.Groups[0].Name, c.Groups[0].Builtin = "counter", "counter"
	})
	one.do("loading the site", chromedp.Navigate("http://"+a.Addr()+"/"))
	two := one.newTab("two")
	two.do("loading the site", chromedp.Navigate("http://"+a.Addr()+"/"))
	typing := `
		window.__t = { ok: 0, errors: [], done: false };
		import("/_stickyd/client.mjs").then(async (m) => {
			const p = window.__p = m.page({ kind: "counter", id: "duplicated" });
			for (let i = 0; i < 60; i++) {
				try { await p.send({ op: "note", text: "x" }); window.__t.ok++; } catch (e) { window.__t.errors.push(String(e.message)); }
				await new Promise((r) => setTimeout(r, 10 + Math.random() * 30));
			}
			window.__t.done = true;
		});
		true`
	one.js("tab one typing", typing)
	two.js("tab two typing", typing)
	for _, tb := range []*tab{one, two} {
		waitJS(t, tb, "tab "+tb.name+" done", 60*time.Second, `window.__t && window.__t.done`)
	}
	for _, tb := range []*tab{one, two} {
		waitJS(t, tb, "tab "+tb.name+"'s tree with all 120 notes", 20*time.Second,
			`window.__p.tree.notes === 120 && Object.keys(window.__p.tree.note || {}).length === 120`)
		if errs, _ := eval[[]string](tb, `window.__t.errors`); len(errs) > 0 {
			t.Fatalf("tab %s: %q", tb.name, errs)
		}
	}
}
