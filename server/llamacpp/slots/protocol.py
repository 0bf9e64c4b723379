"""Request and response shapes of `POST /slots/{id_slot}?action=...`, as llama-server b11434
spells them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SlotActionRequest",
    "SlotEraseResponse",
    "SlotRestoreResponse",
    "SlotRestoreTimings",
    "SlotSaveResponse",
    "SlotSaveTimings",
]


class SlotActionRequest(BaseModel):
    """Unknown fields are ignored, as llama-server does."""

    model_config = ConfigDict(extra="ignore")

    filename: str | None = Field(
        None,
        description="save / restore: a file name in --slot-save-path (no directories, no `..`)",
    )


class SlotSaveTimings(BaseModel):
    save_ms: float


class SlotRestoreTimings(BaseModel):
    restore_ms: float


class SlotSaveResponse(BaseModel):
    id_slot: int
    filename: str
    n_saved: int = Field(description="Tokens the slot's KV held")
    n_written: int = Field(description="Bytes written")
    timings: SlotSaveTimings


class SlotRestoreResponse(BaseModel):
    id_slot: int
    filename: str
    n_restored: int = Field(description="Tokens the slot's KV holds now")
    n_read: int = Field(description="Bytes read")
    timings: SlotRestoreTimings


class SlotEraseResponse(BaseModel):
    id_slot: int
    n_erased: int = Field(description="Tokens the slot's KV held")
