"""pycounter: the Go counter example's live-data part in Python (app.py)."""
