"""A local stand-in for the Hugging Face hub's file API, for `llamactl pull` tests.

It speaks what the hub speaks to a downloader: the tree listing
(`/api/models/OWNER/REPO/tree/REV?recursive=true`, with LFS sizes and SHA-256 ids) and
`/OWNER/REPO/resolve/REV/PATH`, answered with a 302 to a content URL that honours Range
requests. It can cut a body short once (a broken connection), lie about a hash, refuse
a gated repo, and play a hostile mirror (`serve_anything`: every file request gets those
bytes, whatever path it names, so a listed `../../x.gguf` would really arrive).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


@dataclass
class FakeHub:
    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)
    cut_after: int | None = None  # the next body stops after this many bytes
    wrong_hash: set[str] = field(default_factory=set)  # paths listed with another SHA-256
    ranges: list[str] = field(default_factory=list)  # Range headers seen
    serve_anything: bytes | None = None  # answer every non-listing GET with these bytes
    requests: list[str] = field(default_factory=list)  # the paths asked for
    url: str = ""

    def start(self) -> FakeHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub.handle(self)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        path = unquote(urlparse(req.path).path)
        self.requests.append(path)
        parts = path.strip("/").split("/")
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "tree":
            return self._tree(req, f"{parts[2]}/{parts[3]}")
        if self.serve_anything is not None:
            return self._send(req, 200, self.serve_anything, "application/octet-stream")
        if len(parts) >= 5 and parts[2] == "resolve":
            repo, file = f"{parts[0]}/{parts[1]}", "/".join(parts[4:])
            if repo in self.gated:
                return self._send(req, 401, b"gated")
            if file not in self.repos.get(repo, {}):
                return self._send(req, 404, b"no such file")
            req.send_response(302)
            req.send_header("Location", f"/cdn/{repo}/{file}")
            req.send_header("Content-Length", "0")
            req.end_headers()
            return None
        if parts[0] == "cdn":
            return self._content(req, f"{parts[1]}/{parts[2]}", "/".join(parts[3:]))
        return self._send(req, 404, b"not found")

    def _tree(self, req: BaseHTTPRequestHandler, repo: str) -> None:
        if repo in self.gated:
            return self._send(req, 401, b"gated")
        if repo not in self.repos:
            return self._send(req, 404, b'{"error":"Repository not found"}')
        listing = []
        for path, data in self.repos[repo].items():
            oid = hashlib.sha256(data + (b"x" if path in self.wrong_hash else b"")).hexdigest()
            listing.append(
                {"type": "file", "path": path, "size": len(data),
                 "lfs": {"oid": oid, "size": len(data)}}
            )  # fmt: skip
        listing.append({"type": "file", "path": "README.md", "size": 5})
        self._send(req, 200, json.dumps(listing).encode(), "application/json")

    def _content(self, req: BaseHTTPRequestHandler, repo: str, file: str) -> None:
        data = self.repos[repo][file]
        start = 0
        header = req.headers.get("Range")
        if header:
            self.ranges.append(header)
            start = int(header.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                return self._send(req, 416, b"")
            req.send_response(206)
            req.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            req.send_response(200)
        body = data[start:]
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        if self.cut_after is not None:
            cut, self.cut_after = self.cut_after, None
            req.wfile.write(body[:cut])
            req.wfile.flush()
            req.close_connection = True
            return None
        req.wfile.write(body)
        return None

    @staticmethod
    def _send(req: BaseHTTPRequestHandler, code: int, body: bytes, kind: str = "text/plain"):
        req.send_response(code)
        req.send_header("Content-Type", kind)
        req.send_header("Content-Length", str(len(body)))
        req.end_headers()
        req.wfile.write(body)
