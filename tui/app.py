"""The Textual app: a voice (and text) conversation with a llamactl server over /v1/realtime.

Three things run beside Textual's own loop: the session worker (connects, reads server events
and updates the screen), the sender worker (one queue, so audio, commits and text turns reach
the server in the order they were made), and the audio source's thread (mic or file), whose
blocks are handed to the loop. Everything on screen is changed on the loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Input

from llamactl import AudioDeviceError, ConnectionClosedError, RealtimeClientError, RepetitionGuard
from llamactl.devices import EchoCanceller, Player, input_devices, open_player
from llamactl.realtime.client import TURN_HELP, TURN_MODES, RealtimeClient, session_config

from . import events as ev
from .audio import AudioSource, MicSource, level_dbfs
from .widgets import ChatLine, DevicePicker, History, MicBar, ReasoningPane, StatusBar, TurnLatency

HELP = (
    "Speak (voice activity ends your turn) or type below and press enter. Keys: ctrl+t "
    "mutes the mic, or talks in push-to-talk mode (f3 cycles server VAD, semantic VAD and "
    "push to talk); escape interrupts the answer; "
    "ctrl+s ends the model's reasoning now; ctrl+r shows the reasoning; f2 picks the "
    "microphone; ctrl+q quits. Commands: /reset (new conversation, reconnects), /devices, "
    "/help, /quit."
)
BENIGN_ERRORS = {"response_cancel_not_active"}

SourceFactory = Callable[[int | None], AudioSource]
PlayerFactory = Callable[[], tuple[Player, str | None]]


def latency_from_metadata(metadata: dict[str, Any]) -> TurnLatency | None:
    """A server's own per-turn figures (`response.done` metadata), in ms or s, if it sent any."""
    found: dict[str, float] = {}
    for key, raw in metadata.items():
        try:
            value = float(raw)
        except (TypeError, ValueError):
            continue
        name = key.lower()
        seconds = value / 1000 if name.endswith("_ms") else value
        if "transcri" in name:
            found["transcript"] = seconds
        elif "first_audio" in name:
            found["first_audio"] = seconds
        elif "first_token" in name or "first_text" in name:
            found["first_token"] = seconds
    return TurnLatency(**found) if found else None


class ChatApp(App[None]):
    """`llamactl tui`."""

    TITLE = "llamactl tui"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #status { height: 1; background: $boost; padding: 0 1; }
    #history { height: 1fr; padding: 0 1; }
    ChatLine { margin-bottom: 1; }
    ChatLine.assistant { color: $text; }
    ChatLine.system { color: $text-muted; margin-bottom: 0; }
    ChatLine.error { color: $error; }
    #reasoning { height: auto; max-height: 14; padding: 0; margin: 0 1; border: none; }
    #reasoning Contents { max-height: 10; overflow-y: auto; padding: 0 2; }
    #mic { height: 1; padding: 0 1; }
    #prompt { border: tall $primary 50%; }
    #prompt:focus { border: tall $primary; }
    """
    BINDINGS = [
        Binding("ctrl+t", "talk", "Talk/mute", priority=True),
        Binding("escape", "interrupt", "Interrupt"),
        Binding("ctrl+s", "skip_reasoning", "Skip reasoning", priority=True),
        Binding("ctrl+r", "toggle_reasoning", "Reasoning", priority=True),
        Binding("f2", "devices", "Mic"),
        Binding("f3", "cycle_turn", "Turns"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("pageup", "history_page(-1)", "Scroll up", show=False),
        Binding("pagedown", "history_page(1)", "Scroll down", show=False),
    ]

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        device: int | None = None,
        vad: bool = True,
        turn: str | None = None,
        eagerness: str = "auto",
        server_label: str | None = None,
        instructions: str | None = None,
        reasoning_budget: int | None = None,
        source_factory: SourceFactory = MicSource,
        player_factory: PlayerFactory = open_player,
        list_devices: Callable[[], list[dict[str, Any]]] = input_devices,
        echo_cancel: bool = True,
        voice: str | None = None,
    ) -> None:
        super().__init__()
        self.voice = voice  # the answers' voice (None: the server's default)
        self.url = url
        self.api_key = api_key
        self.model = model
        self.device = device
        self.turn = turn or ("server" if vad else "manual")  # one of TURN_MODES
        self.eagerness = eagerness  # for semantic turns
        self.server_label = server_label or url
        self.instructions = instructions
        self.reasoning_budget = reasoning_budget  # thinking tokens per answer (None: server's)
        self.source_factory = source_factory
        self.player_factory = player_factory
        self.list_devices = list_devices
        self.echo_cancel = echo_cancel  # on loudspeakers: the answer is not heard as the user
        self.canceller: EchoCanceller | None = None  # when a real player plays the answers
        self._cancelling = False  # the live microphone's blocks go through the canceller
        self.client: RealtimeClient | None = None  # a live session (after session.created)
        self._confirmed_turn: tuple[str, str | None] | None = None  # the server's last word
        self._conn: RealtimeClient | None = None  # the session worker's socket, live or not
        self.player: Player = Player()
        self.source: AudioSource | None = None
        self.sending = False  # mic blocks go to the server (VAD: unmuted; PTT: talking)
        self.response_id: str | None = None
        self.control_requests: list[str] = []  # response ids whose reasoning we asked to end
        self._skipped: set[str] = set()  # ... and those whose reasoning the server ended
        self._outbox: asyncio.Queue[tuple[Any, ...]] = asyncio.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._user_lines: dict[str, ChatLine] = {}
        self._answer_lines: dict[str, ChatLine] = {}
        # the loop guard, per response; the responses it stopped
        self._guards: dict[str, RepetitionGuard] = {}
        self._repeating: set[str] = set()
        self._answer_kind: dict[str, bool] = {}  # response id -> spoken transcript or text
        self._waiting_source = False
        self._turn_end: float | None = None
        self._latency = TurnLatency()

    # ------------------------------------------------------------------ layout
    def compose(self) -> ComposeResult:
        yield StatusBar(
            self.server_label,
            reasoning_budget=self.reasoning_budget,
            turn=self._turn_label(),
            id="status",
        )
        yield History(id="history")
        yield ReasoningPane(id="reasoning")
        yield MicBar(id="mic")
        yield Input(placeholder="Type a message and press enter (/help, /reset)", id="prompt")
        yield Footer()

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def history(self) -> History:
        return self.query_one(History)

    @property
    def reasoning(self) -> ReasoningPane:
        return self.query_one(ReasoningPane)

    @property
    def mic(self) -> MicBar:
        return self.query_one(MicBar)

    def on_mount(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.model:
            self.status.set(model=self.model)
        self.player, why = self.player_factory()
        if why:
            self.say("system", f"No sound output ({why}): answers are shown as text only.")
        if self.echo_cancel and self.player.available:
            canceller = self.canceller = EchoCanceller(self.player.rate)
            self.player.on_played = lambda pcm: canceller.played(np.frombuffer(pcm, "<i2"))
        self.mic.set(mode=self._mic_mode())
        self._sender()
        self.start_session()
        self.start_mic()
        self.query_one(Input).focus()

    async def on_unmount(self) -> None:
        if self.source is not None:
            self.source.stop()
        self.player.close()
        if self._conn is not None:
            await self._conn.close()

    # ---------------------------------------------------------------- messages
    def say(self, role: str, text: str, **kwargs: Any) -> ChatLine:
        return self.history.add(ChatLine(role, text, **kwargs))

    def error(self, message: str) -> None:
        self.say("error", message)

    def set_state(self, state: str) -> None:
        self.status.set(state=state)

    def _idle_state(self) -> str:
        if self.client is None:
            return "disconnected"
        if self.vad and self.sending:
            return "listening"
        return "ready"

    # ----------------------------------------------------------------- session
    def start_session(self) -> None:
        self.set_state("connecting")
        self._session()

    @work(group="session", exclusive=True, exit_on_error=False)
    async def _session(self) -> None:
        client = RealtimeClient(self.url, api_key=self.api_key, model=self.model)
        try:
            await client.connect()
        except RealtimeClientError as exc:
            self.error(f"{exc}. /reset tries again.")
            self.set_state("disconnected")
            return
        self._conn = client
        try:
            # answered after session.created; until then the session takes no other event
            await client.update_session(self._session_config())
            self.set_state("starting session")
            async for message in client.events():
                event = ev.of(message)
                if self.client is not client and isinstance(event, ev.SessionReady):
                    await self._session_ready(client, event)
                self.handle(event)
        except ConnectionClosedError as exc:
            if self._conn is client:
                self.error(f"{exc}. /reset reconnects.")
        except Exception as exc:  # a bug or a server we do not understand: say so, keep going
            if self._conn is client:
                self.error(f"The session failed ({type(exc).__name__}: {exc}). /reset reconnects.")
        finally:
            if self._conn is client:
                self._conn = self.client = None
                self.response_id = None
                self.set_state("disconnected")
            await client.close()

    async def _session_ready(self, client: RealtimeClient, event: ev.SessionReady) -> None:
        self.client = client
        if self._waiting_source:
            self.start_mic()
        if not event.model and not self.model:
            ids = await client.model_ids()
            if ids:
                self.status.set(model=ids[0])
        self.set_state(self._idle_state())

    @property
    def vad(self) -> bool:
        """Does the server end turns (server or semantic VAD), rather than ctrl+t?"""
        return self.turn != "manual"

    def _mic_mode(self) -> str:
        mode = {"server": "VAD", "semantic": "SEM"}.get(self.turn, "PTT")
        return f"{mode} AEC" if self.canceller is not None else mode

    def _turn_label(self) -> str:
        if self.turn == "semantic":
            return f"semantic VAD ({self.eagerness})"
        return "server VAD" if self.turn == "server" else "push to talk"

    def _session_config(self) -> dict[str, Any]:
        return session_config(
            turn=self.turn,
            eagerness=self.eagerness,
            audio_out=self.player.available,
            instructions=self.instructions,
            reasoning_budget=self.reasoning_budget,
            voice=self.voice,
        )

    # ------------------------------------------------------------------ sender
    def send(self, *command: Any) -> None:
        self._outbox.put_nowait(command)

    @work(group="sender", exit_on_error=False)
    async def _sender(self) -> None:
        while True:
            command = await self._outbox.get()
            client = self.client
            if client is None:
                continue
            try:
                await self._send_one(client, command)
            except RealtimeClientError:
                pass  # the session worker reports the lost connection
            except Exception as exc:
                self.error(f"Could not send {command[0]} ({type(exc).__name__}: {exc}).")

    async def _send_one(self, client: RealtimeClient, command: tuple[Any, ...]) -> None:
        kind = command[0]
        if kind == "audio":
            await client.append_audio(command[1])
        elif kind == "commit":
            await client.commit()
            await client.create_response()
        elif kind == "clear":
            await client.clear_input()
        elif kind == "text":
            await client.add_user_text(command[1])
            await client.create_response()
        elif kind == "cancel":
            await client.cancel_response()
        elif kind == "truncate":
            await client.truncate(command[1], command[2])
        elif kind == "session":
            await client.update_session(command[1])

    # --------------------------------------------------------------- audio in
    def start_mic(self) -> None:
        if self.source is not None:
            self.source.stop()
            self.source = None
        source = self.source_factory(self.device)
        if not source.live and self.client is None:
            self._waiting_source = True  # a recording must not play into the void
            self.mic.set(problem=None, device=source.name, active=False)
            return
        self._waiting_source = False
        if self.canceller is not None and source.live:
            source.on_capture = self.canceller.captured
        try:
            source.start(self._block_from_thread, self._end_from_thread)
        except AudioDeviceError as exc:
            self.mic.set(problem="no microphone: type below, or f2 picks one", active=False)
            self.error(f"No microphone: {exc}. Type your messages instead; f2 picks a device.")
            self.sending = False
            return
        self.source = source
        # a recording is not heard by a room: only a live microphone has an echo to cancel
        self._cancelling = self.canceller is not None and source.live
        self.sending = self.vad
        self.mic.set(problem=None, device=source.name, active=self.sending)
        if self.client is not None:
            self.set_state(self._idle_state())

    def _block_from_thread(self, block: np.ndarray) -> None:
        if self._cancelling and self.canceller is not None:
            block = self.canceller.process(block)  # here, on the microphone's own thread
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_block, block)

    def _end_from_thread(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._on_source_end)

    def _on_block(self, block: np.ndarray) -> None:
        self.mic.level(level_dbfs(block))
        if self.sending:
            self.send("audio", block.astype("<i2").tobytes())

    def _on_source_end(self) -> None:
        name = self.source.name if self.source is not None else "audio"
        self.source = None
        if not self.vad and self.sending:
            self._end_talk()
        self.sending = False
        self.mic.set(active=False, db=-96.0, problem=f"{name} ended")

    # ------------------------------------------------------------- server events
    def handle(self, event: ev.ServerEvent) -> None:
        handler = getattr(self, f"_on_{type(event).__name__}", None)
        if handler is not None:
            handler(event)

    def _on_SessionReady(self, event: ev.SessionReady) -> None:
        if event.model:
            self.status.set(model=event.model)
        if event.updated:  # the server's word on the turn mode, which an update may not get
            in_force = turn_in_force(event.session)
            if in_force is not None:
                self._confirmed_turn = in_force
                turn, eagerness = in_force
                if turn != self.turn or eagerness not in (None, self.eagerness):
                    self._use_turn(turn, eagerness)

    def _user_line(self, item_id: str | None) -> ChatLine:
        key = item_id or "?"
        line = self._user_lines.get(key)
        if line is None:
            line = self._user_lines[key] = self.say("user", "", partial=True)
        return line

    def _on_SpeechStarted(self, event: ev.SpeechStarted) -> None:
        if self.player.busy or self.response_id:
            self.player.clear()  # the server cancels and truncates; stop the sound here
        self._user_line(event.item_id)
        self.set_state("hearing you")

    def _on_SpeechStopped(self, event: ev.SpeechStopped) -> None:
        self._turn_end = time.monotonic()
        self.set_state("transcribing")

    def _on_InputCommitted(self, event: ev.InputCommitted) -> None:
        self._user_line(event.item_id)
        if self._turn_end is None:
            self._turn_end = time.monotonic()

    def _on_UserTranscriptDelta(self, event: ev.UserTranscriptDelta) -> None:
        self._user_line(event.item_id).append(event.delta)

    def _on_UserTranscriptDone(self, event: ev.UserTranscriptDone) -> None:
        line = self._user_line(event.item_id)
        text = event.transcript.strip()
        line.set_text(text, partial=False, note="" if text else "no speech heard")
        self._latency.transcript = self._since_turn_end()

    def _on_UserTranscriptFailed(self, event: ev.UserTranscriptFailed) -> None:
        self._user_line(event.item_id).set_text("", partial=False, note="not transcribed")
        self.error(f"Transcription failed: {event.message}")

    def _on_ResponseStarted(self, event: ev.ResponseStarted) -> None:
        self.response_id = event.response_id
        self.reasoning.start()
        if self._turn_end is None:
            self._turn_end = time.monotonic()
        self._latency = TurnLatency(transcript=self._latency.transcript)
        self.set_state("thinking")

    def _on_ReasoningDelta(self, event: ev.ReasoningDelta) -> None:
        self._first("first_token")
        self.reasoning.append(event.delta)
        if self.reasoning.state == "streaming":
            self.set_state("thinking")

    def _on_ReasoningDone(self, event: ev.ReasoningDone) -> None:
        if self.reasoning.state in ("streaming", "idle") and self.reasoning.text:
            self.reasoning.mark("done")

    def _answer_line(self, event: ev.AnswerDelta | ev.AnswerDone) -> ChatLine | None:
        key = event.response_id or self.response_id or "?"
        kind = self._answer_kind.setdefault(key, event.spoken)
        if kind != event.spoken:
            return None  # text and spoken transcript of one answer: show one of them
        line = self._answer_lines.get(key)
        if line is None:
            line = self._answer_lines[key] = self.say("assistant", "", partial=True)
        return line

    def _on_AnswerDelta(self, event: ev.AnswerDelta) -> None:
        self._first("first_token")
        if self.reasoning.state == "streaming":
            self.reasoning.mark("done")  # a "skipping" pane waits for the control answer
        line = self._answer_line(event)
        if line is not None:
            line.append(event.delta)
            self.history.scroll_end(animate=False)
            self._guard(event.response_id or self.response_id or "?", event.delta)
        self.set_state("answering")

    def _guard(self, key: str, delta: str) -> None:
        """Stop an answer caught in a repetition, as Esc would, and say why."""
        guard = self._guards.setdefault(key, RepetitionGuard())
        if key not in self._repeating and guard.feed(delta):
            self._repeating.add(key)
            self._barge_in()

    def _on_AnswerDone(self, event: ev.AnswerDone) -> None:
        line = self._answer_line(event)
        if line is not None:
            line.set_text(event.text or line.text, partial=False)

    def _on_AudioDelta(self, event: ev.AudioDelta) -> None:
        self._first("first_audio")
        self.player.play(event.item_id, event.pcm)
        self.set_state("speaking")

    def _on_ResponseFinished(self, event: ev.ResponseFinished) -> None:
        key = event.response_id or self.response_id or "?"
        line = self._answer_lines.get(key)
        self._guards.pop(key, None)
        if key in self._repeating:
            self._repeating.discard(key)
            if line is not None:
                line.set_text(line.text, partial=False, note="stopped: repeating")
        elif event.status == "cancelled":
            if line is not None:
                line.set_text(line.text, partial=False, note="interrupted")
        elif event.status in ("failed", "incomplete"):
            self.error(f"The response {event.status}: {event.reason or 'no reason given'}")
            if line is not None:
                line.set_text(line.text, partial=False, note=event.status)
        elif line is not None:
            line.set_text(line.text, partial=False, note=self._skip_note(key))
        if self.reasoning.state == "streaming":
            self.reasoning.mark("done")
        if event.response_id is None or event.response_id == self.response_id:
            self.response_id = None
        measured = latency_from_metadata(event.metadata)
        self.status.set(latency=measured or self._latency)
        self._turn_end = None
        self.set_state(self._idle_state())

    def _on_OutputAudioCleared(self, event: ev.OutputAudioCleared) -> None:
        self.player.clear()

    def _on_ItemTruncated(self, event: ev.ItemTruncated) -> None:
        self.say("system", f"Answer cut at {event.audio_end_ms or 0} ms of audio.")

    def _on_ServerError(self, event: ev.ServerError) -> None:
        if event.code in BENIGN_ERRORS:
            return
        where = f" ({event.param})" if event.param else ""
        self.error(f"Server: {event.message}{where}")
        refused = (event.param or "").startswith("session.audio.input.turn_detection")
        if refused and self._confirmed_turn is not None:
            self._use_turn(*self._confirmed_turn)  # the session kept its mode: show that one

    def _since_turn_end(self) -> float | None:
        return None if self._turn_end is None else time.monotonic() - self._turn_end

    def _first(self, field: str) -> None:
        if getattr(self._latency, field) is None:
            setattr(self._latency, field, self._since_turn_end())

    # ------------------------------------------------------------------ actions
    def action_talk(self) -> None:
        if self.source is None:
            self.start_mic()
            return
        if self.vad:
            self.sending = not self.sending
            self.mic.set(active=self.sending)
            self.set_state(self._idle_state())
            return
        if self.sending:
            self._end_talk()
        else:
            self._barge_in()
            self.send("clear")
            self.sending = True
            self.mic.set(active=True)
            self.set_state("recording")

    def _end_talk(self) -> None:
        self.sending = False
        self.mic.set(active=False)
        self._turn_end = time.monotonic()
        self.send("commit")
        self.set_state("transcribing")

    def _barge_in(self) -> bool:
        """Stop the answer: cancel the live response, drop queued sound, tell the server how
        much of the spoken item was heard."""
        stopped = False
        if self.response_id is not None:
            self.send("cancel")
            stopped = True
        if self.player.busy:
            item, heard_ms = self.player.clear()
            if item:
                self.send("truncate", item, heard_ms)
            stopped = True
        return stopped

    def action_interrupt(self) -> None:
        if self._barge_in():
            self.set_state("interrupted")
        else:
            self.notify("Nothing to interrupt.", timeout=2)

    def action_history_page(self, direction: int) -> None:
        """Page through the conversation while the input line keeps the focus."""
        if direction < 0:
            self.history.scroll_page_up(animate=False)
        else:
            self.history.scroll_page_down(animate=False)

    def action_toggle_reasoning(self) -> None:
        self.reasoning.collapsed = not self.reasoning.collapsed

    def action_skip_reasoning(self) -> None:
        rid = self.response_id
        if rid is None or self.client is None or self.reasoning.state != "streaming":
            self.notify("No reasoning is streaming now.", timeout=2)
            return
        self.reasoning.mark("skipping")
        self._skip(self.client, rid)

    @work(group="control", exit_on_error=False)
    async def _skip(self, client: RealtimeClient, response_id: str) -> None:
        self.control_requests.append(response_id)
        try:
            result = await client.end_reasoning(response_id)
        except RealtimeClientError as exc:
            self.error(f"Could not skip the reasoning: {exc}")
            self.reasoning.mark("streaming")
            return
        if result.success:
            self.reasoning.mark("skipped")
            self._skipped.add(response_id)
            line = self._answer_lines.get(response_id)
            if line is not None and not line.note:
                line.set_text(line.text, note=self._skip_note(response_id))
        else:
            self.notify(f"Reasoning not skipped: {result.message}", severity="warning")
            if self.reasoning.state == "skipping":
                still = self.response_id == response_id and response_id not in self._answer_lines
                self.reasoning.mark("streaming" if still else "done")

    def _skip_note(self, response_id: str) -> str:
        return "reasoning skipped" if response_id in self._skipped else ""

    def action_cycle_turn(self) -> None:
        """server VAD → semantic VAD → push to talk → server VAD. Shown at once; if the server
        refuses the mode (semantic VAD without Smart Turn), the one in force comes back."""
        self._use_turn(TURN_MODES[(TURN_MODES.index(self.turn) + 1) % len(TURN_MODES)])
        config = self._session_config()
        self.send("session", {"type": "realtime", "audio": {"input": config["audio"]["input"]}})

    def _use_turn(self, turn: str, eagerness: str | None = None) -> None:
        self.turn = turn
        if eagerness is not None:
            self.eagerness = eagerness
        self.sending = self.vad and self.source is not None
        self.mic.set(mode=self._mic_mode(), active=self.sending)
        self.status.set(turn=self._turn_label())
        mode = TURN_HELP[self.turn] + (" (ctrl+t starts/sends)" if not self.vad else "")
        self.say("system", f"Turn taking: {mode}.")
        if self.client is not None:
            self.set_state(self._idle_state())

    def action_devices(self) -> None:
        def chosen(index: int | None) -> None:
            if index is None:
                return
            self.device = None if index < 0 else index
            self.start_mic()

        self.push_screen(DevicePicker(self.list_devices, self.device), chosen)

    # -------------------------------------------------------------------- input
    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        event.input.value = ""
        if not text:
            return
        if text.startswith("/"):
            self.command(text)
            return
        if self.client is None:
            if self._conn is not None:
                self.error("The session is still starting: try again in a moment.")
            else:
                self.error("Not connected to a server: /reset reconnects.")
            return
        self._barge_in()
        self.say("user", text)
        self._turn_end = time.monotonic()
        self._latency = TurnLatency()
        self.send("text", text)
        self.set_state("thinking")

    def command(self, text: str) -> None:
        name = text.split()[0].lower()
        if name == "/reset":
            self.reset()
        elif name == "/help":
            self.say("system", HELP)
        elif name in ("/quit", "/exit"):
            self.exit()
        elif name in ("/devices", "/mic"):
            self.action_devices()
        else:
            self.error(f"Unknown command {name}: try /help.")

    def reset(self) -> None:
        """A new conversation: drop the screen's history and reconnect (a new session)."""
        self.player.clear()
        self.response_id = None
        self._user_lines.clear()
        self._answer_lines.clear()
        self._answer_kind.clear()
        self._skipped.clear()
        self._turn_end = None
        self._latency = TurnLatency()
        self.history.remove_children()
        self.reasoning.start()
        self.status.set(latency=TurnLatency())
        client, self.client, self._conn = self._conn, None, None
        if client is not None:
            asyncio.ensure_future(client.close())
        self.say("system", "New conversation.")
        self.start_session()


_TURN_OF_TYPE = {"server_vad": "server", "semantic_vad": "semantic"}


def turn_in_force(session: dict[str, Any]) -> tuple[str, str | None] | None:
    """(turn mode, eagerness: semantic turns only) of an effective session; None when it does
    not say."""
    audio = session.get("audio")
    source = audio.get("input") if isinstance(audio, dict) else None
    if not isinstance(source, dict) or "turn_detection" not in source:
        return None
    td = source["turn_detection"]
    if td is None:
        return "manual", None
    turn = _TURN_OF_TYPE.get(td.get("type", "")) if isinstance(td, dict) else None
    if turn is None:
        return None
    return turn, str(td.get("eagerness", "auto")) if turn == "semantic" else None
