"""``python -m rlsup.supervisor.cli``: how the daemon is started (and a way to run rlsup without its script)."""

import os

from .main import main

os.environ.setdefault("PYTHONUNBUFFERED", "1")
main()
