package browser

import (
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stickyd/stickyd/internal/agent"
)

// client.js's binding layer in Chromium: page.bind draws a value of the
// tree into an element and page.bindList one child per entry of a map,
// each drawn again when a delta touches it (an entry alone when only it
// changed), and stickyd.html builds DOM whose interpolations are text.
func TestClientBindings(t *testing.T) {
	t.Parallel()
	a := startAgentWith(t, "inprocess", 1, func(c *agent.Config) { c.Groups[0].Builtin = "counter" })
	br := startBrowser(t, "bind")
	tb := br.newTab("bind")
	tb.do("loading the site", chromedp.Navigate("http://"+a.Addr()+"/"))
	tb.js("a bound page", `
		document.body.innerHTML = '<p id="n"></p><ul id="notes"></ul><div id="x"></div>';
		const s = document.createElement("script");
		s.src = "/_stickyd/client.js";
		s.onload = () => {
			const p = window.__p = stickyd.page({ kind: "notes", id: "bind-1" });
			window.__draws = {};
			p.bind(document.getElementById("n"), "notes", (n) => (n || 0) + " notes");
			p.bindList(document.getElementById("notes"), "note", (text, key) => {
				window.__draws[key] = (window.__draws[key] || 0) + 1;
				return stickyd.html`+"`"+`<li title="${key}">${text}</li>`+"`"+`;
			}, { order: (a, b) => +a[0] - +b[0], empty: "no notes yet" });
		};
		document.head.appendChild(s);
		true`)
	waitJS(t, tb, "the page live", 20*time.Second, `window.__p && window.__p.status === "live"`)
	waitJS(t, tb, "the empty list", 5*time.Second, `document.getElementById("notes").textContent === "no notes yet"`)

	for _, text := range []string{"first", "<b>second</b>", "third"} {
		if _, err := await[outcome](tb, sendJS(`{ op: "note", text: `+jsString(text)+` }`)); err != nil {
			t.Fatal(err)
		}
	}
	waitJS(t, tb, "three notes drawn", 5*time.Second, `document.querySelectorAll("#notes li").length === 3`)
	items, err := eval[[]string](tb, `Array.from(document.querySelectorAll("#notes li"), (li) => li.dataset.key + "=" + li.textContent + "/" + li.title)`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(items, ",") != "0=first/0,1=<b>second</b>/1,2=third/2" {
		t.Fatalf("the list drew %q", items)
	}
	// Markup in a value is text: no <b> element was made.
	if n, _ := eval[int](tb, `document.querySelectorAll("#notes b").length`); n != 0 {
		t.Fatalf("a note's markup became %d elements", n)
	}
	if got, _ := eval[string](tb, `document.getElementById("n").textContent`); got != "3 notes" {
		t.Fatalf("the bound count says %q", got)
	}
	// Each entry was drawn once: a new note draws only itself.
	draws, _ := eval[map[string]int](tb, `window.__draws`)
	if draws["0"] != 1 || draws["1"] != 1 || draws["2"] != 1 {
		t.Fatalf("entries drawn %v, want each once", draws)
	}
	// An on* attribute takes no interpolation; a script URL is dropped.
	if msg, _ := eval[string](tb, `(() => { try { stickyd.html`+"`"+`<a onclick="${"x"}">a</a>`+"`"+`; return "built"; } catch (e) { return e.message; } })()`); !strings.Contains(msg, "onclick") {
		t.Fatalf("an interpolated onclick: %q", msg)
	}
	if href, _ := eval[string](tb, `stickyd.html`+"`"+`<a href="${"javascript:alert(1)"}">a</a>`+"`"+`.getAttribute("href")`); href != "" {
		t.Fatalf("a javascript: href was kept: %q", href)
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}
