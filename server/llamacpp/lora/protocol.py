"""Request and response shapes of `/lora-adapters`, as llama-server b11434 spells them."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["LoraAdapterInfo", "LoraScale", "LoraSetResponse"]


class LoraScale(BaseModel):
    """One adapter's scale, in `POST /lora-adapters` and a request's `lora` field."""

    model_config = ConfigDict(extra="ignore")

    id: int = Field(description="The adapter's id (its place in --lora, then --lora-scaled)")
    scale: float = Field(0.0, description="0 turns the adapter off")


class LoraAdapterInfo(BaseModel):
    id: int
    path: str = Field(description="The file as --lora / --lora-scaled named it")
    scale: float = Field(description="The global scale now")
    task_name: str = Field(description="The adapter's adapter.lora.task_name, or empty")
    prompt_prefix: str = Field(description="The adapter's adapter.lora.prompt_prefix, or empty")
    alora_invocation_string: str | None = Field(
        None, description="Activated LoRA (aLoRA) adapters only: the invocation text"
    )
    alora_invocation_tokens: list[int] | None = Field(
        None, description="Activated LoRA (aLoRA) adapters only: the invocation tokens"
    )


class LoraSetResponse(BaseModel):
    success: bool = True
