"""What the images and audio of one chat request may cost, checked before anything decodes them.

A chat request's media are decoded by mtmd (images by stb_image at 3 bytes a pixel, audio by
miniaudio), and the decoded forms are held until the prompt is built. A small compressed file
can state an enormous size, so each item is checked as it is taken, from what its header says:

- at most `--max-media` items a request (counted before the next one is read);
- at most `--max-media-pixels` image pixels a request, summed over its images;
- audio no longer than `--max-audio-seconds`, and no longer than its size pays for
  (`read_audio`'s bound), through llamactl's own allow-listed decoder.

The engine then decodes the request's media one request at a time (`media_prompt`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llamactl import (
    LlamactlError,
    read_audio,
    read_image_header,
)
from llamactl.config import Settings

from .errors import APIError
from .limits import over_limit

__all__ = ["MediaBudget"]


@dataclass
class MediaBudget:
    """The running count of one request's media against the server's limits."""

    max_items: int
    max_pixels: int
    max_audio_seconds: float
    items: int = 0
    pixels: int = field(default=0)

    @classmethod
    def from_settings(cls, settings: Settings) -> MediaBudget:
        return cls(settings.max_media, settings.max_media_pixels, settings.max_audio_seconds)

    def take_slot(self, where: str) -> None:
        """Count one more item; called before its bytes are read."""
        self.items += 1
        if self.items > self.max_items:
            got = f"image or audio clip number {self.items} of the request"
            raise over_limit(where, got, self.max_items, "max_media")

    def check(self, data: bytes, kind: str, where: str) -> None:
        """Refuse an item whose header states more than what is left of the budget."""
        try:
            if kind == "image":
                self._check_image(data, where)
            else:
                read_audio(data, max_seconds=self.max_audio_seconds)
        except LlamactlError as exc:
            raise APIError(400, f"Field '{where}': {exc}") from None

    def _check_image(self, data: bytes, where: str) -> None:
        header = read_image_header(data)
        self.pixels += header.pixels
        if self.pixels > self.max_pixels:
            raise APIError(
                400,
                f"Field '{where}': the {header.format} image is {header.width} x "
                f"{header.height} pixels; this request's images pass {self.max_pixels} pixels, "
                "this server's limit (--max-media-pixels or LLAMACTL_MAX_MEDIA_PIXELS raises it)",
            )
