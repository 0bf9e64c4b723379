"""One child `llamactl serve` process: start it, know when it is ready, stop it, measure it.

The child's output is read continuously (a full pipe would block it), logged under the
router's logger with the model's name, and its last lines kept to explain a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import signal
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence

import httpx

from llamactl import ChildFailedError, resident_bytes

from .listener import ChildListener
from .proof import check_child

log = logging.getLogger("llamactl.router")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Linux: the child gets SIGTERM if the router dies without stopping it (kill -9)."""
    if _LIBC is None:
        return
    with contextlib.suppress(Exception):
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


_LIBC = ctypes.CDLL(None) if sys.platform == "linux" else None


class ChildProcess:
    """A model server on `listener` (127.0.0.1:`port`, bound by the router and inherited by
    the child: see `listener.py`); `start()` returns once its /health answers 200 and it has
    proved that it knows `secret`.

    `secret` is the API key the child requires (it reaches the child in `env`, never in its
    command line): only the router knows it, so nothing else on the machine can use the
    child's port. It is never logged, and kept out of this object's repr.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        env: Mapping[str, str],
        listener: ChildListener,
        secret: str,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.env = dict(env)
        self.listener = listener
        self.port = listener.port
        self.secret = secret
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: asyncio.subprocess.Process | None = None
        self.output: deque[str] = deque(maxlen=40)
        self.stopping = False
        self.started_at: float | None = None
        self._reader: asyncio.Task[None] | None = None
        self._retirer: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"<ChildProcess {self.name!r} port={self.port} pid={self.pid}>"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def start(self, client: httpx.AsyncClient, timeout: float) -> None:
        """Spawn, wait until healthy, check its proof; ChildFailedError (with the child's own
        words where it has some) otherwise."""
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            pass_fds=(self.listener.fd,),  # the same descriptor number in the child
            start_new_session=True,  # Ctrl-C reaches the router, which stops children in order
            preexec_fn=_die_with_parent if _LIBC is not None else None,
        )
        self.started_at = time.monotonic()
        self._reader = asyncio.create_task(self._read_output())
        self._retirer = asyncio.create_task(self._retire_on_exit(self.proc))
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.returncode is not None:
                await self._drain()
                raise ChildFailedError(self.exit_message())
            with contextlib.suppress(httpx.HTTPError):
                resp = await client.get(self.url + "/health", timeout=2)
                if resp.status_code == 200:
                    await self._check_proof(client)
                    return
                message = _error_message(resp)
                if message and message != "Loading model":
                    raise ChildFailedError(message)
            if time.monotonic() > deadline:
                raise ChildFailedError(f"not ready after {timeout:g} s")
            await asyncio.sleep(0.05)

    async def _check_proof(self, client: httpx.AsyncClient) -> None:
        """The child's proof of its secret; a child that died meanwhile is reported as such."""
        try:
            await check_child(client, self.url, self.secret, self.port)
        except ChildFailedError:
            assert self.proc is not None
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.proc.wait()), 0.5)
            if self.proc.returncode is not None:
                await self._drain()
                raise ChildFailedError(self.exit_message()) from None
            raise

    async def wait(self) -> int:
        assert self.proc is not None
        code = await self.proc.wait()
        self.listener.retire()
        await self._drain()
        return code

    async def _retire_on_exit(self, proc: asyncio.subprocess.Process) -> None:
        """The moment the child is seen to exit, the router lets go of its port (after taking
        the connections the child never accepted off its queue)."""
        await proc.wait()
        self.listener.retire()

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM (the child ends its streams and exits), then SIGKILL after `grace` s."""
        self.stopping = True
        if self.proc is None:
            self.listener.retire()
            return
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), grace)
            except asyncio.TimeoutError:
                log.warning("[%s] did not stop in %g s; killing it", self.name, grace)
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                await self.proc.wait()
        self.listener.retire()
        await self._drain()

    def rss_bytes(self) -> int | None:
        """Resident memory of the child (Linux /proc), None where unknown."""
        pid = self.pid
        return resident_bytes(pid) if self.alive and pid is not None else None

    def exit_message(self) -> str:
        """Why the child ended: its exit status and its last error line."""
        code = self.proc.returncode if self.proc else None
        if code is not None and code < 0:
            try:
                status = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                status = f"killed by signal {-code}"
        else:
            status = f"exited with code {code}"
        last = self.last_error_line()
        return f"{status}: {last}" if last else status

    def last_error_line(self) -> str | None:
        lines = [line for line in self.output if line.strip()]
        for line in reversed(lines):
            if line.lower().startswith(("error", "traceback")) or "Error" in line.split(":")[0]:
                return line.strip()
        return lines[-1].strip() if lines else None

    async def _read_output(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        while True:
            try:
                raw = await self.proc.stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):  # an over-long line: skip it
                continue
            if not raw:
                return
            line = raw.decode("utf-8", "replace").rstrip()
            self.output.append(line)
            log.info("[%s] %s", self.name, line)

    async def _drain(self) -> None:
        """Let the reader take the last lines the child wrote before it exited."""
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), 2)


def _error_message(resp: httpx.Response) -> str | None:
    try:
        return resp.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return None
