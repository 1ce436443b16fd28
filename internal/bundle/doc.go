// Package bundle owns application bundles: immutable, content-addressed
// .tar.gz archives of an exact build (its binary or files) with a manifest
// that records where every piece came from, repository by repository and
// commit by commit.
//
// A bundle is named by its digest, "sha256:<hex>" of the archive's bytes.
// Pack makes one deterministically; Verify checks one completely (digest,
// manifest, every file, no unsafe entries) before anything trusts it; an
// Archive keeps them (a directory, or an HTTP server made with Handler); a
// Cache unpacks verified bundles, read-only, for workers to run from.
//
// This package never builds, installs or fetches source: opening a bundle
// reads only the archive and the local cache. It never runs what it unpacks,
// and it never uses an archive, a cached copy or a manifest it has not
// verified.
package bundle
