// Package demo is stickyd's demonstration application: a back-office page
// with an order grid over 600,000 generated rows, filtered and sorted on the
// server, beside a small document being composed; and customer pages that
// show live data shared by every worker.
//
// It shows how an App keeps the truth in a page's Tree (the filter, the sort,
// the scroll offset, the visible window) and only derived, rebuildable objects
// in Page.Local (the filtered and sorted index), and how it writes to the tree
// only what changed, so each message costs a few small deltas.
//
// The customer page (customer.go, shared.go) shows the live-data SDK
// (docs/data.md): a customer record lives in the global store at
// customers/<id>; a page reads it with worker.Get and subscribes to the
// table "customers"; a save takes a grant on the record (worker.Acquire),
// applies the edit over the master's current content, commits, and
// publishes the change, and every page showing that customer, on any
// worker, reads it again (OnTableChange). A ticket sequence in the store
// (seq/tickets) hands out numbers under a grant, so two people on two
// workers never get the same one.
//
// The package owns its data set, its query engine and its web assets. It must
// never keep per-person state outside a Page, never touch the network (the
// store and the tables are reached through the SDK, on the worker's
// channel), and never panic on what a page or a browser sends: bad input is
// an error.
package demo
