"""The TUI's widgets: status bar, conversation lines, reasoning pane, mic meter, device picker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Collapsible, Label, OptionList, Static
from textual.widgets.option_list import Option


@dataclass
class TurnLatency:
    """Seconds from the end of the user's turn (commit, end of speech, or text sent)."""

    transcript: float | None = None
    first_token: float | None = None
    first_audio: float | None = None

    def describe(self) -> str:
        parts = [
            f"{name} {value:.2f} s"
            for name, value in (
                ("transcript", self.transcript),
                ("first token", self.first_token),
                ("first audio", self.first_audio),
            )
            if value is not None
        ]
        return " · ".join(parts) if parts else "no turn yet"


class StatusBar(Static):
    """One line: server, model, session state, how turns end, last turn's latencies."""

    def __init__(
        self,
        server: str,
        *,
        reasoning_budget: int | None = None,
        turn: str = "server VAD",
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.server = server
        self.turn = turn
        self.reasoning_budget = reasoning_budget  # shown when the session bounds thinking
        self.model = "—"
        self.state = "connecting"
        self.latency = TurnLatency()
        self.refresh_line()

    def set(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self, key, value)
        self.refresh_line()

    def refresh_line(self) -> None:
        dot = {"disconnected": "red", "error": "red", "connecting": "yellow"}.get(
            self.state, "green"
        )
        line = Text.assemble(
            ("● ", dot),
            (self.model, "bold"),
            " · ",
            (self.state, "bold italic"),
            " · ",
            self.turn,
            " · last turn: ",
            self.latency.describe(),
            " · ",
            (self.server, "dim"),
        )
        if self.reasoning_budget is not None and self.reasoning_budget >= 0:
            line.append(f" · thinking ≤ {self.reasoning_budget} tokens", style="dim")
        self.update(line)


class ChatLine(Static):
    """One line of the conversation: who, and text that may still be growing."""

    LABELS = {"user": "You:", "assistant": "Assistant:", "system": "·", "error": "Error:"}

    def __init__(self, role: str, text: str = "", *, partial: bool = False, **kwargs: Any):
        super().__init__(classes=f"line {role}", **kwargs)
        self.role = role
        self.text = text
        self.partial = partial
        self.note = ""
        self._render_line()

    def append(self, delta: str) -> None:
        self.text += delta
        self._render_line()

    def set_text(self, text: str, *, partial: bool | None = None, note: str | None = None) -> None:
        self.text = text
        if partial is not None:
            self.partial = partial
        if note is not None:
            self.note = note
        self._render_line()

    def _render_line(self) -> None:
        label = self.LABELS.get(self.role, self.role)
        body = self.text or ("…" if self.partial else "")
        line = Text.assemble((f"{label} ", "bold"), (body, "dim" if self.partial else ""))
        if self.note:
            line.append(f"  [{self.note}]", style="italic dim")
        self.update(line)


class History(VerticalScroll):
    """The conversation, scrollable; new lines scroll into view."""

    def add(self, line: ChatLine) -> ChatLine:
        self.mount(line)
        self.scroll_end(animate=False)
        return line


class ReasoningPane(Collapsible):
    """The live (or last) response's reasoning: collapsed by default, expandable."""

    def __init__(self, **kwargs: Any) -> None:
        self.body = Static("", id="reasoning-text")
        super().__init__(self.body, title="Reasoning", collapsed=True, **kwargs)
        self.text = ""
        self.state = "idle"  # idle | streaming | done | skipped | skipping
        self._retitle()

    def start(self) -> None:
        self.text = ""
        self.state = "idle"
        self.body.update("")
        self._retitle()

    def append(self, delta: str) -> None:
        if self.state == "idle":
            self.state = "streaming"
        self.text += delta
        self.body.update(Text(self.text, style="italic"))
        self._retitle()

    def mark(self, state: str) -> None:
        self.state = state
        self._retitle()

    def _retitle(self) -> None:
        words = len(self.text.split())
        status = {
            "idle": "none yet",
            "streaming": f"thinking… {words} words · ctrl+s skips",
            "skipping": f"skipping… {words} words",
            "skipped": f"skipped after {words} words",
            "done": f"{words} words",
        }[self.state]
        self.title = f"Reasoning ({status})"


class MicBar(Static):
    """The input device, a level meter and the turn-taking mode."""

    WIDTH = 24

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.device = "no microphone"
        self.mode = "VAD"
        self.active = False
        self.db = -96.0
        self.problem: str | None = None
        self.refresh_bar()

    def set(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self, key, value)
        self.refresh_bar()

    def level(self, db: float) -> None:
        self.db = db
        self.refresh_bar()

    def refresh_bar(self) -> None:
        if self.problem:
            self.update(Text.assemble(("Mic: ", "bold"), (self.problem, "red")))
            return
        filled = int(round(max(0.0, min(1.0, (self.db + 60) / 60)) * self.WIDTH))
        bar = Text("▕")
        bar.append("█" * filled, style="green" if self.db < -6 else "red")
        bar.append("░" * (self.WIDTH - filled), style="dim")
        bar.append("▏")
        if self.mode in ("VAD", "SEM"):
            heard = "semantic turns" if self.mode == "SEM" else "voice activity"
            mode = f"listening ({heard})" if self.active else "muted · ctrl+t unmutes"
        else:
            mode = "talking… ctrl+t sends" if self.active else "push to talk · ctrl+t"
        self.update(
            Text.assemble("Mic: ", (self.device, "bold"), " ", bar, f" {self.db:5.0f} dB  ", mode)
        )


class DevicePicker(ModalScreen[int | None]):
    """Choose the input device; dismisses with its index, or -1 for the default one."""

    BINDINGS = [Binding("escape", "dismiss_none", "Cancel")]
    DEFAULT_CSS = """
    DevicePicker { align: center middle; }
    DevicePicker > Vertical { width: 70; height: auto; max-height: 80%;
        border: round $accent; background: $panel; padding: 0 1; }
    DevicePicker Label { margin-bottom: 1; }
    DevicePicker OptionList { height: auto; max-height: 16; }
    """

    def __init__(self, list_devices: Callable[[], list[dict[str, Any]]], current: int | None):
        super().__init__()
        self.list_devices = list_devices
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Input device (enter picks, escape cancels)")
            yield OptionList(id="devices")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        label = self.query_one(Label)
        try:
            devices = self.list_devices()
        except Exception as exc:  # AudioDeviceError: PortAudio missing
            label.update(Text(f"No input devices: {exc}", style="red"))
            return
        if not devices:
            label.update(Text("No input devices were found (escape closes).", style="red"))
            return
        options.add_option(Option("system default", id="-1"))
        highlight = 0
        for i, dev in enumerate(devices, start=1):
            mark = " (default)" if dev.get("is_default") else ""
            current = ""
            if dev["index"] == self.current:
                current, highlight = " ◀ in use", i
            options.add_option(
                Option(f"{dev['index']}: {dev['name']}{mark}{current}", id=str(dev["index"]))
            )
        options.highlighted = highlight
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(int(event.option.id or "-1"))

    def action_dismiss_none(self) -> None:
        self.dismiss(None)
