"""``python -m attnviz.ui.serve [streamlit run's options]``: ``streamlit run app.py`` with the server's own limits set
before it takes its first request.

Streamlit runs none of the app's code until a visitor's first page run, and two limits must hold before that:

- uvicorn's HTTP/1.1 parser (h11; Streamlit 1.67 serves with uvicorn, and uses h11 unless httptools is installed)
  resets a request whose request line and headers pass 16 KiB before they are whole, so a shared link of 200 KB
  never reached the app and its visitor saw a reset instead of the app's word on it. Each connection's parser takes
  LINK_BYTES instead: more than the 2 MB Chromium sends, so every link a browser sends reaches the app.
  (httptools could not replace it: its URL parser refuses any URL over 64 KiB.)
- the upload caps (ui/uploads.py) are installed as the server starts, so no PUT to the upload route passes uncapped.
- Streamlit drops a query string over 512 Ki characters whole, with only a line in its log: ``links.install`` has it
  arrive as a note of its length, so the first visitor of a 600 KB link hears why nothing of it was used.
"""

from __future__ import annotations

import sys
from pathlib import Path

import uvicorn.protocols.http.h11_impl as h11_impl
from streamlit.web import cli
from streamlit.web.server import server

from attnviz.ui import links, uploads

LINK_BYTES = 4 * 2**20  # a request's line and headers, whole: twice Chromium's 2 MB URL limit
APP = Path(__file__).resolve().parents[2] / "app.py"


def prepare() -> None:
    """Set the limits above for the server about to start in this process."""
    h11_impl.DEFAULT_MAX_INCOMPLETE_EVENT_SIZE = LINK_BYTES  # read by every new connection's parser
    links.install()  # a link Streamlit drops whole (over 512 Ki characters) is still said to have been dropped
    start = server.Server.start
    if getattr(start, "attnviz", False):
        return

    async def start_capped(self):  # the runtime and its upload manager exist; nothing is served yet
        uploads.install()
        await start(self)

    start_capped.attnviz = True
    server.Server.start = start_capped


def main(argv: list[str] | None = None) -> None:
    prepare()
    cli.main(["run", str(APP), *(sys.argv[1:] if argv is None else argv)])  # exits with the server


if __name__ == "__main__":
    main()
