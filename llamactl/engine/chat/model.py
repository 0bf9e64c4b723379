"""Chat on top of the engine: render messages with the model's template, stream the answer
split into reasoning and content.

This is the one place that joins templates (`chat/`), the batched engine and the output
parsers, so the CLI, the server and the TUI all chat the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from llamactl.core.errors import ContextLengthError, InvalidRequestError

from ..engine import Engine, GenerationRequest, ReasoningSpec
from ..media_prompt import UNSUPPORTED_MEDIA_MESSAGES, MediaInput, MediaPrompt, tokenize_media
from ..stream import GenerationStream
from ..types import (
    ChatEvent,
    ContentDelta,
    Done,
    Event,
    PromptProgress,
    ReasoningDelta,
    ReasoningFormat,
    SamplingParams,
    ToolCallDelta,
)
from . import (
    CHATML_TEMPLATE,
    ChatTemplate,
    OutputPipeline,
    PlainTextParser,
    ReasoningParser,
    TextStage,
    ThinkingMarkers,
    ToolCall,
    ToolCallFormat,
    ToolCallParser,
    tool_call_format,
    tool_call_grammar,
)
from .builtin import BuiltinTemplate, builtin_template_names
from .generic_tools import GenericReplyParser, answers_allowed, generic_grammar, generic_messages
from .messages import Message
from .reasoning import RawAndReasoning
from .spans import message_delimiters, tokenize_delimiters, user_starts


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    n: int = 1
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None  # "auto" | "none" | "required" | a function
    parallel_tool_calls: bool = True
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    add_generation_prompt: bool | None = None  # None: unless the assistant's reply is continued
    continue_final_message: bool | None = None  # None: when the last message is the assistant's
    echo: bool = False  # include the continued assistant text in the output
    logprobs: int | None = None
    enable_thinking: bool | None = None
    reasoning_budget: int | None = None  # reasoning tokens before the end marker is forced
    reasoning_format: ReasoningFormat | None = None  # None: "auto"
    cache_prompt: bool = True
    ignore_eos: bool = False
    report_progress: bool = False  # PromptProgress events while the prompt decodes
    # images and audio, in the order of the media markers (`media_marker`) in the messages
    media: tuple[MediaInput, ...] = ()
    urgent_tokens: int = 0  # first tokens decoded before other requests' (GenerationRequest)


@dataclass(frozen=True)
class RenderedChat:
    text: str
    tokens: list[int]
    prefill: str  # assistant text being continued ("" when none)
    opens_reasoning: bool  # the prompt leaves a reasoning block open
    media: MediaPrompt | None = None  # the media chunks, when the request has media


class ChatModel:
    """Chat with one engine's model; cheap to share between threads."""

    def __init__(self, engine: Engine, template: str | None = None) -> None:
        self.engine = engine
        info = engine.model.info
        self.template_source = template or info.chat_template or CHATML_TEMPLATE
        self.template: ChatTemplate | BuiltinTemplate
        if self.template_source in builtin_template_names():  # `--chat-template llama2`
            self.template = BuiltinTemplate(self.template_source)
        else:
            self.template = ChatTemplate(
                self.template_source, bos_token=info.bos_token, eos_token=info.eos_token
            )
        self.markers: ThinkingMarkers | None = self.template.markers
        # Unknown families get Hermes' <tool_call> JSON, the common default of fine-tunes.
        self.tool_format: ToolCallFormat = (
            tool_call_format(self.template_source) or ToolCallFormat.HERMES
        )
        # Templates that never mention tools get them in the system message (generic_tools.py).
        self.generic_tools = not self.template.supports_tools
        self._end_tokens: tuple[int, ...] | None = None
        model = engine.model
        self._delimiters = tokenize_delimiters(
            message_delimiters(self.template_source),
            lambda t: model.tokenize(t, add_special=False, parse_special=True),
        )

    def render(self, req: ChatRequest, *, token_limit: int | None = None) -> RenderedChat:
        """The prompt's text and tokens. With `token_limit`, a prompt longer than that is
        refused as soon as tokenising passes it (a huge chat is not tokenised to its end)."""
        if not req.messages:
            raise InvalidRequestError("messages must not be empty")
        last_is_assistant = req.messages[-1].get("role") == "assistant"
        cont = req.continue_final_message
        if cont is None:
            cont = last_is_assistant and req.add_generation_prompt is not True
        add_gen = req.add_generation_prompt
        if add_gen is None:
            add_gen = not cont
        kwargs = dict(req.template_kwargs)
        toggle = self.template.thinking_toggle
        if req.enable_thinking is not None and toggle is not None:
            kwargs.setdefault(toggle, req.enable_thinking)
        elif toggle == "enable_thinking":
            # llama.cpp renders every template with enable_thinking true unless told otherwise,
            # so templates that read "undefined" as off (DeepSeek R1's, Command R7B) still think.
            kwargs.setdefault(toggle, True)
        messages: Sequence[Message] = req.messages
        tools = req.tools
        if self.generic_tools:
            described = tools if self.calls_tools(req) else None
            messages = generic_messages(
                messages,
                described,
                answer=answers_allowed(req.tool_choice),
                parallel=req.parallel_tool_calls,
                continued=cont,
            )
            tools = None
        text = self.template.render(
            messages,
            tools=tools,
            add_generation_prompt=add_gen,
            continue_final_message=cont,
            **kwargs,
        )
        prefill = _content_of(req.messages[-1]) if cont else ""
        add_special = not _starts_with_bos(text, self)
        media = self._tokenize_media(text, req.media, add_special) if req.media else None
        if media is not None:
            tokens = media.tokens
        else:
            tokens = self.engine.model.tokenize(text, add_special=add_special, limit=token_limit)
        if token_limit is not None and len(tokens) > token_limit:
            raise ContextLengthError(len(tokens), token_limit, at_least=True)
        return RenderedChat(text, tokens, prefill, self._opens_reasoning(text), media)

    @property
    def media_marker(self) -> str:
        """The text that stands for one image or audio clip in a message (mtmd's marker)."""
        projector = self.engine.projector
        return projector.marker if projector is not None else "<__media__>"

    def supports(self, kind: str) -> bool:
        """Whether the model reads media of `kind` ("image", "audio"): it has a projector."""
        projector = self.engine.projector
        return projector is not None and projector.supports(kind)

    def _tokenize_media(
        self, text: str, media: tuple[MediaInput, ...], add_special: bool
    ) -> MediaPrompt:
        projector = self.engine.projector
        if projector is None:
            raise InvalidRequestError(UNSUPPORTED_MEDIA_MESSAGES[media[0].kind])
        return tokenize_media(projector, text, media, add_special=add_special)

    def _opens_reasoning(self, text: str) -> bool:
        m = self.markers
        return m is not None and text.rfind(m.start) > text.rfind(m.end)

    def calls_tools(self, req: ChatRequest) -> bool:
        """Whether tool calls are parsed out of this request's output. A template without
        tools whose client also asks for a response_format gets that format and no tools
        when calling is optional: its one reply object cannot be both."""
        if not req.tools or req.tool_choice == "none":
            return False
        return not (
            self.generic_tools and req.sampling.grammar and answers_allowed(req.tool_choice)
        )

    def _sampling(self, req: ChatRequest, rendered: RenderedChat) -> SamplingParams:
        """The request's sampling, with a grammar forcing tool calls when tool_choice asks."""
        if not self.calls_tools(req):
            return req.sampling
        make_grammar: Callable[..., str | None] = (
            generic_grammar if self.generic_tools else partial(tool_call_grammar, self.tool_format)
        )
        grammar = make_grammar(
            req.tools,
            req.tool_choice,
            parallel=req.parallel_tool_calls,
            reasoning=self.markers,  # the engine samples the reasoning itself, grammar-free
            reasoning_open=rendered.opens_reasoning,
        )
        if grammar is None:
            return req.sampling
        if req.sampling.grammar:
            raise InvalidRequestError("tool_choice cannot be combined with response_format")
        return replace(req.sampling, grammar=grammar)

    def start(self, req: ChatRequest) -> ChatStream:
        rendered = self.render(req, token_limit=self.engine.n_ctx_slot)
        sampling = self._sampling(req, rendered)
        stream = self.engine.submit(
            GenerationRequest(
                prompt=rendered.tokens,
                sampling=sampling,
                max_tokens=req.max_tokens,
                stop=req.stop,
                n=req.n,
                logprobs=req.logprobs,
                cache_prompt=req.cache_prompt,
                ignore_eos=req.ignore_eos,
                # Call markers are often control tokens ([TOOL_CALLS], <|tool_call|>...).
                render_special=self._renders_special() or self.calls_tools(req),
                reasoning=self._reasoning_spec(rendered, req),
                user_starts=user_starts(rendered.tokens, self._delimiters),
                media=rendered.media,
                report_progress=req.report_progress,
                urgent_tokens=req.urgent_tokens,
            )
        )
        return ChatStream(self, stream, rendered, req)

    def _reasoning_spec(self, rendered: RenderedChat, req: ChatRequest) -> ReasoningSpec | None:
        m = self.markers
        if m is None:
            return None
        if self._end_tokens is None:
            self._end_tokens = tuple(
                self.engine.model.tokenize("\n" + m.end + "\n\n", add_special=False)
            )
        return ReasoningSpec(
            start=m.start,
            end=m.end,
            end_tokens=self._end_tokens,
            open=rendered.opens_reasoning,
            budget=req.reasoning_budget,
        )

    def _renders_special(self) -> bool:
        """Families whose markers are control tokens (gpt-oss channels) need them in the text."""
        m = self.markers
        if m is None:
            return False
        model = self.engine.model
        ids = model.tokenize(m.start, add_special=False, parse_special=True)
        return any(not model.detokenize([t]) for t in ids)


class ChatStream:
    """Chat events of one request; one reasoning parser per choice."""

    def __init__(
        self, chat: ChatModel, stream: GenerationStream, rendered: RenderedChat, req: ChatRequest
    ) -> None:
        self.chat = chat
        self.raw = stream
        self.rendered = rendered
        markers = chat.markers
        self._parsers: list[TextStage] = []
        self._tool_parsers: list[ToolCallParser | GenericReplyParser | None] = []
        fmt = req.reasoning_format or "auto"
        for i in range(req.n):
            first: TextStage
            if markers is None or fmt == "none":
                first = PlainTextParser(i)
            else:
                first = ReasoningParser.from_markers(
                    markers,
                    starts_in_reasoning=rendered.opens_reasoning,
                    index=i,
                    continues_text=bool(rendered.prefill),
                )
                if fmt == "deepseek-legacy":
                    first = RawAndReasoning(first, opened=rendered.opens_reasoning)
            if chat.calls_tools(req):
                tools: ToolCallParser | GenericReplyParser = (
                    GenericReplyParser(i)
                    if chat.generic_tools
                    else ToolCallParser(chat.tool_format, index=i, tools=req.tools)
                )
                self._parsers.append(OutputPipeline(first, tools))
                self._tool_parsers.append(tools)
            else:
                self._parsers.append(first)
                self._tool_parsers.append(None)
        self._echo = req.echo and rendered.prefill
        self._prefill_sent = [False] * req.n

    @property
    def prompt_tokens(self) -> int:
        return len(self.rendered.tokens)

    def cancel(self) -> None:
        self.raw.cancel()

    @property
    def reasoning_enabled(self) -> bool:
        return self.chat.markers is not None

    def end_reasoning(self) -> bool:
        """Force the end-of-thinking marker next in every choice that is reasoning now."""
        return self.chat.engine.end_reasoning(self.raw)

    def translate(self, event: Event) -> list[ChatEvent]:
        """One raw engine event as chat events; public for callers that iterate `raw` because
        they also need what only raw events carry (log-probabilities)."""
        if isinstance(event, PromptProgress):
            return [event]
        i = event.index
        parser = self._parsers[i]
        out: list[ChatEvent] = []
        if self._echo and not self._prefill_sent[i]:
            self._prefill_sent[i] = True
            out.append(ContentDelta(self.rendered.prefill, i))
        if isinstance(event, Done):
            tools = self._tool_parsers[i]
            if tools is not None and event.finish_reason == "length":
                tools.cut_off()  # a call cut by max_tokens is no content (docs/api-openai.md)
            out.extend(parser.finish())
            out.append(event)
            return out
        out.extend(parser.feed(event.text))
        return out

    def __iter__(self) -> Iterator[ChatEvent]:
        for event in self.raw:
            yield from self.translate(event)

    async def __aiter__(self) -> AsyncIterator[ChatEvent]:
        async for event in self.raw:
            for out in self.translate(event):
                yield out

    def collect(self) -> list[ChatResult]:
        """Run to the end; each choice's reasoning, content and `Done`."""
        results = [ChatResult() for _ in self._parsers]
        for event in self:
            r = results[event.index]
            if isinstance(event, ReasoningDelta):
                r.reasoning += event.text
            elif isinstance(event, ContentDelta):
                r.content += event.text
            elif isinstance(event, ToolCallDelta):
                r.tool_calls.append(ToolCall(event.id, event.name, event.arguments))
            elif isinstance(event, Done):
                r.done = event
        return results


@dataclass
class ChatResult:
    content: str = ""
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    done: Done | None = None

    @property
    def finish_reason(self) -> str | None:
        """OpenAI's: "tool_calls" when the turn ended by calling tools."""
        if self.done is None:
            return None
        if self.tool_calls and self.done.finish_reason == "stop":
            return "tool_calls"
        return self.done.finish_reason


def _content_of(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):
        return "\n\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _starts_with_bos(text: str, chat: ChatModel) -> bool:
    """Templates that print the BOS token themselves must not get a second one."""
    bos = chat.engine.model.info.bos_token
    return bool(bos) and text.startswith(bos)
