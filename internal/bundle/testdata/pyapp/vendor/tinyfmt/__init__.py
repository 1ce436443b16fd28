__version__ = "1.0"


def shout(s):
    return s.upper() + "!"
