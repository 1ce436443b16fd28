"""The app a python3 group runs: pynotes.wsgi:application."""
from pynotes import create_app

application = create_app()
