package demo

import "github.com/stickyd/stickyd/plugins/worker"

// Release numbers the demo's builds, to show what happens to a person's
// pages when they move between two versions of an application:
//
//   - release 1: grid state schema 1, doc schema 1;
//   - release 2: the grid's state changed shape (schema 2, reads only 2),
//     and the doc gained a "tags" field, an additive change that keeps
//     schema 1, so docs cross in both directions untouched.
//
// The customer page (schema 1) is the same in both: its truth is in the
// global store, which every build reads alike.
//
// A grid page moved from release 1 to 2 (or back) restarts clean and is told
// why; its person keeps their session, login and other pages.
type Release int

// NewRelease returns the demo application as build r.
func NewRelease(r Release) *App {
	a := New()
	a.release = r
	return a
}

var _ worker.Schemas = (*App)(nil)

// Schema declares each page kind's state-schema version for the SDK's
// version rule.
func (a *App) Schema(kind string) (version, oldest uint32, known bool) {
	switch kind {
	case kindGrid:
		if a.release >= 2 {
			return 2, 2, true
		}
		return 1, 1, true
	case kindDoc, kindCustomer:
		return 1, 1, true
	}
	return 0, 0, false
}
