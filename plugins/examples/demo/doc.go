// Package demo is stickyd's demonstration application: a back-office page
// with an order grid over 600,000 generated rows, filtered and sorted on the
// server, beside a small document being composed.
//
// It shows how an App keeps the truth in a page's Tree (the filter, the sort,
// the scroll offset, the visible window) and only derived, rebuildable objects
// in Page.Local (the filtered and sorted index), and how it writes to the tree
// only what changed, so each message costs a few small deltas.
//
// The package owns its data set, its query engine and its web assets. It must
// never keep per-person state outside a Page, never touch the network, and
// never panic on what a page or a browser sends: bad input is an error.
package demo
