// Package site is an ordinary net/http site, a ServeMux with html/template
// pages, that stickyd serves as it is (worker.Site): a shop where each
// visitor keeps a cart, can sign in, and can ask for a slow page. It is the
// example of mounting an existing site; the end-to-end tests run it.
//
// The one stickyd-specific line is where a visitor's state lives: the cart is
// in the connection's Values (worker.SessionFrom), so it stays on the worker
// that holds the visitor, and moves with them. The site never keeps
// per-visitor state in package variables, and never panics on what a
// browser sends: bad input is a 4xx.
package site

import (
	"embed"
	"encoding/json"
	"html/template"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/stickyd/stickyd/plugins/worker"
)

//go:embed templates/index.html
var files embed.FS

var index = template.Must(template.ParseFS(files, "templates/index.html"))

const (
	// maxItems bounds a cart.
	maxItems = 100
	// maxSlow bounds the wait of /slow.
	maxSlow = 10 * time.Second
)

var itemRE = regexp.MustCompile(`^[A-Za-z0-9 _-]{1,40}$`)

// New returns the site's routes:
//
//	GET  /            the cart, with a form to add an item and one to sign in
//	POST /add         item=NAME adds NAME to the cart (303 to /)
//	POST /login       user=NAME signs the visitor in (303 to /)
//	GET  /cart.json   the cart and who serves it, as JSON
//	GET  /slow?ms=N   answers after N ms (at most 10 s): a slow page
func New() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", showCart)
	mux.HandleFunc("POST /add", addItem)
	mux.HandleFunc("POST /login", login)
	mux.HandleFunc("GET /cart.json", cartJSON)
	mux.HandleFunc("GET /slow", slow)
	return mux
}

// view is what the page and /cart.json show.
type view struct {
	Conn   string   `json:"conn"`
	User   string   `json:"user"`
	Worker string   `json:"worker"`
	Items  []string `json:"items"`
}

func session(w http.ResponseWriter, r *http.Request) *worker.Session {
	s := worker.SessionFrom(r.Context())
	if s == nil {
		http.Error(w, "this site runs under stickyd", http.StatusInternalServerError)
	}
	return s
}

// cart reads the cart from the connection's own data.
func cart(s *worker.Session) []string {
	list, _ := s.Values().Get("cart").([]any)
	out := make([]string, 0, len(list))
	for _, v := range list {
		if item, ok := v.(string); ok {
			out = append(out, item)
		}
	}
	return out
}

func viewOf(s *worker.Session) view {
	return view{Conn: s.Conn(), User: s.User(), Worker: s.WorkerID(), Items: cart(s)}
}

func showCart(w http.ResponseWriter, r *http.Request) {
	s := session(w, r)
	if s == nil {
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := index.Execute(w, viewOf(s)); err != nil {
		http.Error(w, "rendering the page", http.StatusInternalServerError)
	}
}

func addItem(w http.ResponseWriter, r *http.Request) {
	s := session(w, r)
	if s == nil {
		return
	}
	item := r.PostFormValue("item")
	if !itemRE.MatchString(item) {
		http.Error(w, "an item is 1-40 letters, digits, spaces, _ or -", http.StatusBadRequest)
		return
	}
	items := cart(s)
	if len(items) >= maxItems {
		http.Error(w, "the cart is full", http.StatusBadRequest)
		return
	}
	if err := s.Values().Set("cart", append(items, item)); err != nil {
		http.Error(w, "saving the cart", http.StatusInternalServerError)
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func login(w http.ResponseWriter, r *http.Request) {
	s := session(w, r)
	if s == nil {
		return
	}
	if err := s.Login(r.PostFormValue("user")); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func cartJSON(w http.ResponseWriter, r *http.Request) {
	s := session(w, r)
	if s == nil {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(viewOf(s))
}

func slow(w http.ResponseWriter, r *http.Request) {
	ms, err := strconv.Atoi(r.URL.Query().Get("ms"))
	d := time.Duration(ms) * time.Millisecond
	if err != nil || d < 0 || d > maxSlow {
		http.Error(w, "ms must be 0..10000", http.StatusBadRequest)
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		http.Error(w, "the request ended before its wait", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("slept " + strconv.Itoa(ms) + " ms\n"))
}
