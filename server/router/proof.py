"""A child proves it knows its secret before the router sends it anything that matters.

The router sends a fresh random nonce to `PROOF_PATH` on the child's socket, with no
credential; the child answers HMAC-SHA256(secret, label, its port, nonce). The router accepts
the child (status `loaded`) only when that matches, so the secret is never revealed to the
server being checked: a process that does not know it learns nothing from the challenge and
cannot answer it. The port is part of the message, so an answer obtained from a real child on
another port proves nothing here; the nonce is new each time, so an old answer cannot be
replayed. The answer itself reveals nothing of the secret (HMAC is a PRF), which is why the
route needs no key. Together with `server.router.listener` (a socket no other process can
bind) the router never writes a prompt or the secret to a process that is not its child.

`ChildProofApp` is the child's side: `llamactl serve --listen-fd N` (the router's children
only) answers the route in front of the whole app, before key or Host checks, and the router
refuses to forward the path from clients.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets

import httpx

from llamactl import ChildFailedError

from ..middleware import ASGIApp, Receive, Scope, Send

PROOF_PATH = "/.llamactl/child-proof"
CHALLENGE_HEADER = b"x-llamactl-challenge"
_LABEL = b"llamactl router child proof v1\0"
_NONCE = re.compile(r"[0-9a-f]{64}")


def new_nonce() -> str:
    """256 random bits, as 64 lower-case hex digits."""
    return secrets.token_hex(32)


def proof(secret: str, port: int, nonce: str) -> str:
    """What only a holder of `secret` can answer to `nonce` on `port`."""
    message = _LABEL + str(port).encode("ascii") + b"\0" + nonce.encode("ascii")
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


class ChildProofApp:
    """The child's ASGI app: `PROOF_PATH` answered here, everything else by `app`."""

    def __init__(self, app: ASGIApp, secret: str, port: int) -> None:
        self.app = app
        self._secret = secret
        self.port = port

    def __repr__(self) -> str:
        return f"<ChildProofApp port={self.port}>"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != PROOF_PATH:
            await self.app(scope, receive, send)
            return
        nonce = ""
        body: dict[str, object]
        for key, value in scope.get("headers", ()):
            if key.lower() == CHALLENGE_HEADER:
                nonce = value.decode("latin-1")
        if scope.get("method") != "GET":
            status, body = 405, {"error": {"message": "method not allowed", "code": 405}}
        elif not _NONCE.fullmatch(nonce):
            message = f"{CHALLENGE_HEADER.decode()} must be 64 lower-case hex digits"
            status, body = 400, {"error": {"message": message, "code": 400}}
        else:
            status, body = 200, {"proof": proof(self._secret, self.port, nonce)}
        data = json.dumps(body).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})


async def check_child(client: httpx.AsyncClient, url: str, secret: str, port: int) -> None:
    """ChildFailedError unless the server at `url` (127.0.0.1:`port`) proves it knows
    `secret`. Nothing secret is sent: a nonce, and no credential."""
    nonce = new_nonce()
    why: str
    try:
        resp = await client.get(
            url + PROOF_PATH, headers={CHALLENGE_HEADER.decode(): nonce}, timeout=10
        )
    except httpx.HTTPError as e:
        why = str(e) or type(e).__name__
    else:
        answer = None
        if resp.status_code == 200:
            try:
                answer = resp.json().get("proof")
            except (ValueError, AttributeError):
                answer = None
        if isinstance(answer, str) and hmac.compare_digest(
            answer.encode("ascii", "replace"), proof(secret, port, nonce).encode("ascii")
        ):
            return
        why = f"HTTP {resp.status_code}" if resp.status_code != 200 else "a wrong answer"
    raise ChildFailedError(
        f"the server on port {port} did not prove it is this router's child ({why}):"
        " nothing was sent to it"
    )
