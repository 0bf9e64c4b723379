"""Each format's syntax (markers, reader, grammar) in one table."""

from __future__ import annotations

from collections.abc import Sequence

from llamactl.engine.chat.tool_formats import grammars as gr
from llamactl.engine.chat.tool_formats import readers as rd
from llamactl.engine.chat.tool_formats.base import Syntax, ToolCallFormat, ToolSpec
from llamactl.engine.chat.tool_formats.gbnf import GrammarBuilder, literal

F = ToolCallFormat

# DeepSeek's markers use fullwidth bars and "▁" (U+2581) for spaces.
DS_CALLS_BEGIN = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
DS_CALLS_END = "<\uff5ctool\u2581calls\u2581end\uff5c>"
DS_CALL_BEGIN = "<\uff5ctool\u2581call\u2581begin\uff5c>"
DS_CALL_END = "<\uff5ctool\u2581call\u2581end\uff5c>"
DS_SEP = "<\uff5ctool\u2581sep\uff5c>"
DSML = "\uff5cDSML\uff5c"

_JSON_ITEM = gr.json_object_call()
# Where the Qwen3-Coder reader ends a value (it forgives a missing </parameter>).
QWEN_VALUE_ENDS = ("</parameter>", "<parameter=", "</function>")


def _hermes_call(g: GrammarBuilder, tool: ToolSpec) -> str:
    open_tag, close_tag = literal("<tool_call>\n"), literal("\n</tool_call>")
    return f"{open_tag} {_JSON_ITEM(g, tool)} {close_tag}"


def _kimi_call(g: GrammarBuilder, tool: ToolSpec) -> str:
    schema = g.schema(gr.parameters_schema(tool))
    return (
        f"{literal('<|tool_call_begin|>functions.' + tool.name + ':')} [0-9]+ "
        f"{literal('<|tool_call_argument_begin|>')} {schema} {literal('<|tool_call_end|>')}"
    )


def _solar_call(g: GrammarBuilder, tool: ToolSpec) -> str:
    schema = g.schema(gr.parameters_schema(tool))
    head = f"<|tool_call:name|>{tool.name}<|tool_call:args|>"
    return (
        f"{literal('<|tool_call:begin|>')} [a-zA-Z0-9]{{9}} {literal(head)} {schema} "
        f"{literal('<|tool_call:end|>')}"
    )


def _command_r_call(g: GrammarBuilder, tool: ToolSpec) -> str:
    schema = g.schema(gr.parameters_schema(tool))
    head = literal('{"tool_call_id": "')
    middle = literal(f'", "tool_name": "{tool.name}", "parameters": ')
    return f"{head} [0-9]+ {middle} {schema} {literal('}')}"


def _grammar(build: gr.CallBuilder, separator: str = "", before: str = "", after: str = ""):
    """A Syntax.grammar: the calls `build` writes, framed and separated as given."""

    def grammar(g: GrammarBuilder, tools: Sequence[ToolSpec], parallel: bool) -> str:
        return gr.calls(g, tools, parallel, build, separator=separator, before=before, after=after)

    return grammar


def _tagged(tag: str, build: gr.CallBuilder, *, bare_function: bool = False) -> Syntax:
    starts = (f"<{tag}>", "<function=") if bare_function else (f"<{tag}>",)
    return Syntax(
        triggers=starts,
        call_starts=starts,
        read=rd.tagged(f"<{tag}>", f"</{tag}>"),
        grammar=_grammar(build, separator="\n"),
    )


def _json_block(open_tag: str, close_tag: str | None, before: str, sep: str, after: str) -> Syntax:
    return Syntax(
        triggers=(open_tag,),
        call_starts=(open_tag,),
        read=rd.json_block(open_tag, close_tag),
        grammar=_grammar(_JSON_ITEM, separator=sep, before=before, after=after),
    )


def _deepseek(build: gr.CallBuilder, separator: str) -> Syntax:
    return Syntax(
        triggers=(DS_CALLS_BEGIN, DS_CALL_BEGIN),
        call_starts=(DS_CALL_BEGIN,),
        closers=(DS_CALLS_END,),
        read=rd.deepseek(DS_CALL_BEGIN, DS_SEP, DS_CALL_END),
        grammar=_grammar(build, separator=separator, before=DS_CALLS_BEGIN, after=DS_CALLS_END),
    )


def _invoke(ns: str, opener: str, closer: str, param: gr.ParamBuilder) -> Syntax:
    """MiniMax M2 and DeepSeek V3.2/V4: <invoke name="f"> blocks inside a section."""
    build = gr.xml_call(
        lambda name: f'<{ns}invoke name="{name}">\n',
        param,
        (f"</{ns}parameter>",),
        f"</{ns}invoke>\n",
    )
    return Syntax(
        triggers=(opener,),
        call_starts=(f"<{ns}invoke",),
        closers=(closer,),
        read=rd.invoke(ns),
        grammar=_grammar(build, before=opener + "\n", after=closer),
    )


SYNTAXES: dict[ToolCallFormat, Syntax] = {
    F.HERMES: _tagged("tool_call", _hermes_call),
    F.QWEN3_CODER: _tagged(
        "tool_call",
        gr.xml_call(
            lambda name: f"<tool_call>\n<function={name}>\n",
            gr.key_param("<parameter=", ">\n", "\n</parameter>\n"),
            QWEN_VALUE_ENDS,
            "</function>\n</tool_call>",
        ),
        bare_function=True,
    ),
    F.SEED_OSS: _tagged(
        "seed:tool_call",
        gr.xml_call(
            lambda name: f"<seed:tool_call>\n<function={name}>\n",
            gr.key_param("<parameter=", ">", "</parameter>\n"),
            QWEN_VALUE_ENDS,
            "</function>\n</seed:tool_call>",
        ),
    ),
    F.GLM: _tagged(
        "tool_call",
        gr.xml_call(
            lambda name: f"<tool_call>{name}\n",
            gr.key_param("<arg_key>", "</arg_key>\n<arg_value>", "</arg_value>\n"),
            ("</arg_value>",),
            "</tool_call>",
        ),
    ),
    F.FUNCTIONARY_V3_1: Syntax(
        triggers=("<function=",),
        call_starts=("<function=",),
        read=lambda c, schemas: [rd.read_function(c, schemas)],
        grammar=_grammar(gr.named_json_call("<function=", ">", "</function>")),
    ),
    F.LLAMA3_JSON: Syntax(
        triggers=("<|python_tag|>",),
        start_triggers=("{",),
        call_starts=("{", "<|python_tag|>"),
        separators=";",
        read=rd.read_llama,
        parallel=False,  # Llama 3.x templates refuse more than one call per message
        grammar=_grammar(gr.json_object_call(args_key="parameters"), separator="; "),
    ),
    F.MISTRAL: Syntax(
        triggers=("[TOOL_CALLS]",),
        call_starts=("[TOOL_CALLS]",),
        read=rd.read_mistral,
        grammar=_grammar(_JSON_ITEM, separator=", ", before="[TOOL_CALLS][", after="]"),
    ),
    F.MISTRAL_ARGS: Syntax(
        triggers=("[TOOL_CALLS]",),
        call_starts=("[TOOL_CALLS]",),
        read=rd.read_mistral,
        grammar=_grammar(gr.named_json_call("[TOOL_CALLS]", "[ARGS]")),
    ),
    F.GRANITE: _json_block("<|tool_call|>", None, "<|tool_call|>[", ", ", "]"),
    F.DEEPSEEK_R1: _deepseek(
        gr.named_json_call(
            f"{DS_CALL_BEGIN}function{DS_SEP}", "\n```json\n", f"\n```{DS_CALL_END}"
        ),
        "\n",
    ),
    F.DEEPSEEK_V3: _deepseek(gr.named_json_call(DS_CALL_BEGIN, DS_SEP, DS_CALL_END), ""),
    F.DEEPSEEK_V3_2: _invoke(
        DSML, f"<{DSML}function_calls>", f"</{DSML}function_calls>", gr.dsml_param(DSML)
    ),
    F.DEEPSEEK_V4: _invoke(
        DSML, f"<{DSML}tool_calls>", f"</{DSML}tool_calls>", gr.dsml_param(DSML)
    ),
    F.KIMI_K2: Syntax(
        triggers=("<|tool_calls_section_begin|>", "<|tool_call_begin|>"),
        call_starts=("<|tool_call_begin|>",),
        closers=("<|tool_calls_section_end|>",),
        read=rd.read_kimi,
        grammar=_grammar(
            _kimi_call, before="<|tool_calls_section_begin|>", after="<|tool_calls_section_end|>"
        ),
    ),
    F.MINIMAX_M2: _invoke(
        "",
        "<minimax:tool_call>",
        "</minimax:tool_call>",
        gr.key_param('<parameter name="', '">', "</parameter>\n"),
    ),
    F.MINIMAX_M1: _json_block(
        "<tool_calls>", "</tool_calls>", "<tool_calls>\n", "\n", "\n</tool_calls>"
    ),
    F.APRIEL: _json_block("<tool_calls>", "</tool_calls>", "<tool_calls>[", ", ", "]</tool_calls>"),
    F.NEMOTRON_V2: _json_block("<TOOLCALL>", "</TOOLCALL>", "<TOOLCALL>[", ", ", "]</TOOLCALL>"),
    F.COMMAND_R7B: Syntax(
        triggers=("<|START_ACTION|>",),
        call_starts=("<|START_ACTION|>",),
        read=rd.json_block(
            "<|START_ACTION|>",
            "<|END_ACTION|>",
            name_keys=("tool_name",),
            args_keys=("parameters",),
        ),
        grammar=_grammar(
            _command_r_call,
            separator=",\n    ",
            before="<|START_ACTION|>[\n    ",
            after="\n]<|END_ACTION|>",
        ),
    ),
    F.FIREFUNCTION_V2: _json_block("functools", None, "functools[", ", ", "]"),
    F.SOLAR_OPEN: Syntax(
        triggers=("<|begin|>assistant<|tool_calls|>", "<|tool_calls|>", "<|tool_call:begin|>"),
        call_starts=("<|tool_call:begin|>",),
        read=rd.read_solar,
        grammar=_grammar(_solar_call, before="<|tool_calls|>"),
    ),
    F.GPT_OSS: Syntax(
        # After the prompt's "<|start|>assistant" the recipient may come first: " to=functions.f".
        triggers=("<|start|>assistant", "<|channel|>commentary", "to=functions."),
        call_starts=("<|start|>assistant", "<|channel|>commentary", "to=functions."),
        closers=("<|call|>",),
        read=rd.read_gpt_oss,
        parallel=False,  # one call per message; the template renders only the first
        after_reasoning="<|start|>assistant",
        grammar=lambda g, tools, parallel: gr.calls(
            g,
            tools,
            False,
            gr.named_json_call(
                "<|channel|>commentary to=functions.", " <|constrain|>json<|message|>"
            ),
        ),
    ),
    F.LFM2: Syntax(
        triggers=("<|tool_call_start|>",),
        call_starts=("<|tool_call_start|>",),
        read=rd.read_pythonic,
        grammar=_grammar(
            gr.pythonic_call,
            separator=", ",
            before="<|tool_call_start|>[",
            after="]<|tool_call_end|>",
        ),
    ),
}
