"""A WSGI app for the bundle tests: it greets with its dependency."""
