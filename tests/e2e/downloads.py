"""GitHub on loopback: the release's files at `/releases/download/v<version>/<name>` and the
repository's raw files at `/raw/<name>`, over HTTPS, for the docs' `curl` commands.

    with Downloads({"0.2.0": assets_dir}, raw={"cosign.pub": key}, cert=..., key=...) as downloads:
        downloads.url      # "https://127.0.0.1:<port>"
"""

from __future__ import annotations

import http.server
import ssl
import threading
from pathlib import Path
from types import TracebackType
from typing import Any


class Downloads:
    def __init__(self, releases: dict[str, Path], *, raw: dict[str, Path], cert: Path, key: Path) -> None:
        files = {f"/raw/{name}": path for name, path in raw.items()}
        for version, assets in releases.items():
            files |= {f"/releases/download/v{version}/{p.name}": p for p in assets.iterdir() if p.is_file()}

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                path = files.get(self.path)
                if path is None:
                    self.send_error(404)
                    return
                data = path.read_bytes()
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="downloads", daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> Downloads:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
