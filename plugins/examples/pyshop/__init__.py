"""pyshop: a plain WSGI shop hosted by stickyd's Python runtime (app.py)."""
