"""The app a stickyd python3 group runs: flaskr.wsgi:application."""
from flaskr import create_app

application = create_app()
