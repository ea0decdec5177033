"""A web page that asks people "A or B?" and learns as they answer (``scripts/serve.py``).

By role: :mod:`.items` reads the items people compare, :mod:`.store` keeps every question and answer
in SQLite, :mod:`.annotation` runs the learners over them (no web code: testable alone), and
:mod:`.app` is the HTTP face (FastAPI; the ``serve`` extra) serving ``page.html``. Only :mod:`.app`
needs the extra; the rest uses the standard library and the package's live API.
"""
