"""Recent responses kept in memory, so `previous_response_id`, `item_reference` and
`GET /v1/responses/{id}` work as they do on OpenAI's server.

Bounded by count (oldest evicted first) and lost on restart: a local server's conversation
state, not a database. Each entry keeps the whole conversation as items; entries share the
item objects of their predecessors, so a long chain costs little more than its last turn.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from ...state import ServerState
from .convert import Item

MAX_STORED_RESPONSES = 1024


@dataclass(frozen=True)
class StoredResponse:
    response: dict[str, Any]  # the response object as returned
    items: tuple[Item, ...]  # input and output items of the conversation so far (no instructions)


class ResponseStore:
    def __init__(self, capacity: int = MAX_STORED_RESPONSES) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, entry: StoredResponse) -> None:
        with self._lock:
            self._entries[entry.response["id"]] = entry
            self._entries.move_to_end(entry.response["id"])
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            entry = self._entries.get(response_id)
            if entry is not None:
                self._entries.move_to_end(response_id)  # a live conversation stays
            return entry

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._entries.pop(response_id, None) is not None

    def find_item(self, item_id: str) -> Item | None:
        """An input or output item by id, newest responses first."""
        with self._lock:
            entries = list(reversed(self._entries.values()))
        for entry in entries:
            for item in entry.items:
                if getattr(item, "id", None) == item_id:
                    return item
        return None

    def __len__(self) -> int:
        return len(self._entries)


def response_store(app: Any) -> ResponseStore:
    """The server's store (one per server, made on first use)."""
    state: ServerState = app.state.llamactl
    return state.family_state(ResponseStore)
