"""An image's format and size, read from its header before anything decodes it.

mtmd decodes images with stb_image into 3 bytes a pixel, whatever the file's size: a 783 KB
PNG of one colour states 18,000 x 18,000 pixels and decodes to about 1 GB. Reading the size
from the header first lets a caller refuse such an image for the price of a few bytes.

Only the formats whose size is stated near the start and which stb_image decodes are read:
PNG, JPEG, GIF and BMP. Anything else is refused , so no image reaches the
decoder without its size having been checked.
Every refusal is an InvalidRequestError (a 400).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from llamactl.core.errors import InvalidRequestError

__all__ = ["IMAGE_FORMATS", "ImageHeader", "read_image_header"]

IMAGE_FORMATS = "PNG, JPEG, GIF, BMP"

_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # frame headers, not DHT/JPG/DAC
_JPEG_STANDALONE = frozenset(range(0xD0, 0xDA)) | {0x01}  # RSTn, SOI, EOI, TEM: no length


@dataclass(frozen=True)
class ImageHeader:
    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def read_image_header(data: bytes) -> ImageHeader:
    """The image's format and stated size; an InvalidRequestError for anything else."""
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        header = _png(data)
    elif data[:3] == b"\xff\xd8\xff":
        header = _jpeg(data)
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        header = _gif(data)
    elif data[:2] == b"BM":
        header = _bmp(data)
    else:
        raise InvalidRequestError(f"the image is not in a format llamactl reads ({IMAGE_FORMATS})")
    if header.width <= 0 or header.height <= 0:
        raise InvalidRequestError(f"the {header.format} header states an empty image")
    return header


def _truncated(fmt: str) -> InvalidRequestError:
    return InvalidRequestError(f"the {fmt} image is truncated before its size")


def _png(data: bytes) -> ImageHeader:
    # the first chunk must be IHDR: length 13, then width and height (big-endian)
    if len(data) < 24 or data[12:16] != b"IHDR":
        raise _truncated("PNG")
    width, height = struct.unpack(">II", data[16:24])
    return ImageHeader("PNG", width, height)


def _jpeg(data: bytes) -> ImageHeader:
    """Walk the marker segments to the first frame header (SOFn); stb_image sizes the image
    from it."""
    pos = 2
    while pos + 4 <= len(data):
        if data[pos] != 0xFF:
            raise InvalidRequestError("the JPEG image's markers are corrupt")
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _JPEG_STANDALONE:
            pos += 2
            continue
        (length,) = struct.unpack(">H", data[pos + 2 : pos + 4])
        if marker in _JPEG_SOF:
            if pos + 9 > len(data):
                break
            height, width = struct.unpack(">HH", data[pos + 5 : pos + 9])
            return ImageHeader("JPEG", width, height)
        if marker == 0xDA or length < 2:  # image data before any frame header
            raise InvalidRequestError("the JPEG image has no frame header")
        pos += 2 + length
    raise _truncated("JPEG")


def _gif(data: bytes) -> ImageHeader:
    # the logical screen: stb_image decodes every frame onto a canvas of this size
    if len(data) < 10:
        raise _truncated("GIF")
    width, height = struct.unpack("<HH", data[6:10])
    return ImageHeader("GIF", width, height)


def _bmp(data: bytes) -> ImageHeader:
    if len(data) < 26:
        raise _truncated("BMP")
    (info_size,) = struct.unpack("<I", data[14:18])
    if info_size == 12:  # OS/2 1.x: 16-bit sizes
        width, height = struct.unpack("<HH", data[18:22])
        return ImageHeader("BMP", width, height)
    width, height = struct.unpack("<ii", data[18:26])
    return ImageHeader("BMP", width, abs(height))  # negative: stored top-down
