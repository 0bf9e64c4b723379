"""A conversation session's items: the ordered GA items and what the server knows about each.

Kept apart from `ConversationSession`, which takes the client's events and runs turns and
responses: the rules of the list itself (at most `MAX_ITEMS`, insertion after a
`previous_item_id`, the bound on client text, cutting an assistant item back to what was
heard, the chat messages the items become) read in one place, with no socket or engine in it.
Events about the items are sent by the session.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Iterator
from typing import Any

from llamactl import ProtocolError

from .speaker import Speaker

__all__ = ["MAX_CLIENT_TEXT", "MAX_ITEMS", "ConversationItems", "Item", "chat_messages", "cut"]

MAX_ITEMS = 4096
MAX_CLIENT_TEXT = 1024 * 1024  # characters of text in the items a client creates (~250k tokens)


class Item:
    """A conversation item and what the server knows about it beyond its GA shape."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data
        self.transcribed: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self.committed_at = time.monotonic()
        self.speaker: Speaker | None = None  # assistant audio: maps audio back to text
        self.client_chars = 0  # text the client wrote into it (conversation.item.create)

    @property
    def id(self) -> str:
        return self.data["id"]


class ConversationItems:
    """The conversation, in order. Lookups by id refuse a missing one as `item_not_found`."""

    def __init__(self) -> None:
        self._items: list[Item] = []
        self.client_chars = 0  # text in the items the client created (MAX_CLIENT_TEXT)

    def __iter__(self) -> Iterator[Item]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def holds(self, item: Item) -> bool:
        """Is this very item (not one with its id) still in the conversation?"""
        return any(i is item for i in self._items)

    def find(self, item_id: Any) -> Item | None:
        for item in self._items:
            if item.id == item_id:
                return item
        return None

    def index(self, item_id: Any) -> int:
        for i, item in enumerate(self._items):
            if item.id == item_id:
                return i
        raise ProtocolError(
            f"no conversation item with id '{item_id}'", code="item_not_found", param="item_id"
        )

    def get(self, item_id: Any) -> Item:
        """The item (`conversation.item.retrieve`, an `item_reference`)."""
        return self._items[self.index(item_id)]

    def previous_of(self, item_id: str) -> str | None:
        for i, item in enumerate(self._items):
            if item.id == item_id:
                return self._items[i - 1].id if i > 0 else None
        return None

    def check_client_text(self, chars: int) -> None:
        """Refuse an item whose `chars` of client text would pass `MAX_CLIENT_TEXT`."""
        if self.client_chars + chars > MAX_CLIENT_TEXT:
            raise ProtocolError(
                f"the conversation holds at most {MAX_CLIENT_TEXT} characters of client text "
                f"({self.client_chars} now, this item {chars}); delete some items first",
                code="conversation_full",
                param="item.content",
            )

    def insert(self, item: Item, previous: str | None = None) -> str | None:
        """Add `item` after `previous` (None: at the end, "root": first); returns the id of
        the item now before it."""
        if len(self._items) >= MAX_ITEMS:
            raise ProtocolError(
                f"the conversation holds at most {MAX_ITEMS} items; delete some first",
                code="conversation_full",
            )
        if previous is None:
            at = len(self._items)
        elif previous == "root":
            at = 0
        else:
            at = self.index(previous) + 1
        self._items.insert(at, item)
        self.client_chars += item.client_chars
        return self._items[at - 1].id if at > 0 else None

    def delete(self, item_id: Any) -> Item:
        """Remove the item; a response waiting for its transcript stops waiting."""
        item = self._items.pop(self.index(item_id))
        self.client_chars -= item.client_chars
        if not item.transcribed.done():
            item.transcribed.set_result(0.0)
        return item

    def finish(self, data: dict[str, Any], speaker: Speaker | None) -> str | None:
        """A response's item as it ended (and the speaker that said it); returns the id of
        the item before it."""
        for item in self._items:
            if item.id == data["id"]:
                item.data = data
                item.speaker = speaker
        return self.previous_of(data["id"])

    def truncate(self, item_id: Any, audio_end_ms: int) -> Item:
        """`conversation.item.truncate`: an assistant item spoken in this session, cut to
        its first `audio_end_ms` of audio."""
        item = self.get(item_id)
        if item.data["role"] != "assistant" or item.speaker is None:
            raise ProtocolError(
                "only assistant items with audio (made in this session) can be truncated",
                param="item_id",
            )
        total = int(item.speaker.seconds * 1000)
        if audio_end_ms > total:
            raise ProtocolError(
                f"audio_end_ms {audio_end_ms} is past the end of the item's audio ({total} ms)",
                param="audio_end_ms",
            )
        cut(item, audio_end_ms)
        return item


def cut(item: Item, audio_end_ms: int) -> None:
    """Cut a spoken item's transcript back to what its first `audio_end_ms` said."""
    assert item.speaker is not None
    part = item.data["content"][0] if item.data["content"] else None
    if part is not None:
        part["transcript"] = item.speaker.heard_text(part.get("transcript") or "", audio_end_ms)


def chat_messages(instructions: str, items: Iterable[Item]) -> list[dict[str, Any]]:
    """The conversation as chat messages: instructions first, user audio as its transcript,
    assistant audio as its (possibly truncated) transcript; empty turns are left out."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for item in items:
        data = item.data
        texts = []
        for part in data["content"]:
            text = part.get("text") if "text" in part else part.get("transcript")
            if text:
                texts.append(text)
        if texts:
            messages.append({"role": data["role"], "content": " ".join(texts)})
    return messages
