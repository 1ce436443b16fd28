// Command site-dev is the example site (package site, an ordinary net/http
// ServeMux) with stickyd compiled in: `go run ./plugins/examples/site/cmd/site-dev`
// serves it on http://127.0.0.1:8080 on in-process workers, as stickyd dev
// serves its demo; `site-dev -help` lists stickyd's commands, all of which
// it runs. It is how an application's own main embeds stickyd (package dev
// beside the Go SDK).
package main

import (
	"github.com/stickyd/stickyd/plugins/dev"
	"github.com/stickyd/stickyd/plugins/examples/site"
	"github.com/stickyd/stickyd/plugins/worker"
)

func main() {
	app := worker.Site(site.New(), worker.SiteOptions{})
	dev.Main(app, worker.Options{Name: "site", Version: "1"})
}
