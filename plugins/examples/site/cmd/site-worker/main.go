// Command site-worker runs the example site (package site, an ordinary
// net/http ServeMux) as a stickyd worker plugin, on a pool of its own:
// stickyd starts it and talks to it on its channel; it never listens on the
// network. Run by hand, it explains itself and exits.
package main

import (
	"flag"

	"github.com/stickyd/stickyd/plugins/examples/site"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() {
	workers := flag.Int("workers", 16, "goroutines serving the site's requests")
	queue := flag.Int("queue", 1024, "requests that may wait for them; past it 503")
	flag.Parse()
	app := worker.Site(site.New(), worker.SiteOptions{Workers: *workers, QueueMax: *queue})
	worker.Serve(app, worker.Options{Name: "site", Version: "1"})
}
