"""The same app started cold: every worker builds on its own at import."""
from benchapp import application, build  # noqa: F401

build()
