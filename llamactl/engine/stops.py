"""Stop strings matched across token boundaries.

Text that could still be the start of a stop string is held back, so a caller never sees
a partial stop string that later turns out to be one.
"""

from __future__ import annotations


class StopMatcher:
    def __init__(self, stops: list[str] | tuple[str, ...] = ()) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""

    @property
    def active(self) -> bool:
        return bool(self._stops)

    def push(self, text: str) -> tuple[str, str | None]:
        """Feed new text; return (text safe to emit, the stop string found or None).

        Once a stop string is found, the text before it is returned and the rest dropped.
        """
        if not self._stops:
            return text, None
        buf = self._held + text
        found_at, found = -1, None
        for stop in self._stops:
            at = buf.find(stop)
            if at != -1 and (found_at == -1 or at < found_at):
                found_at, found = at, stop
        if found is not None:
            self._held = ""
            return buf[:found_at], found
        keep = self._partial_suffix_len(buf)
        self._held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep], None

    def flush(self) -> str:
        """At the end of generation, held text was not a stop string after all."""
        held, self._held = self._held, ""
        return held

    def _partial_suffix_len(self, buf: str) -> int:
        """Length of the longest suffix of `buf` that is a proper prefix of a stop string.

        Runs on the decode thread after every token, so the candidates are found with C-speed
        searches (where the stop's first character occurs in the tail), not by trying every
        length: long stop strings stay cheap."""
        best = 0
        for stop in self._stops:
            first = stop[0]
            at = buf.find(first, max(0, len(buf) - len(stop) + 1))
            while at != -1 and len(buf) - at > best:
                if stop.startswith(buf[at:]):
                    best = len(buf) - at
                    break
                at = buf.find(first, at + 1)
        return best
