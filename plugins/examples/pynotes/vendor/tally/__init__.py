"""tally: pynotes' own small dependency, vendored as pip install --target
would install it (a pure-Python package and its .dist-info)."""

__version__ = "1.0"


def summary(notes):
    """How many notes, in words."""
    n = len(notes)
    return "no notes" if n == 0 else "1 note" if n == 1 else "%d notes" % n
