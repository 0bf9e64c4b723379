"""Chat template rendering against the real templates models ship (no model needed)."""

from __future__ import annotations

import copy

import pytest
from sharedkit import CHAT_TEMPLATES

from llamactl.core.errors import InvalidRequestError, TemplateError
from llamactl.engine.chat import (
    CHATML_TEMPLATE,
    ChatTemplate,
    content_text,
    prompt_opens_reasoning,
    split_reasoning,
    supports_enable_thinking,
    thinking_markers,
    thinking_toggle,
)

TEMPLATE_DIR = CHAT_TEMPLATES
TEMPLATES = sorted(path.stem for path in TEMPLATE_DIR.glob("*.jinja"))
needs_templates = pytest.mark.skipif(not TEMPLATES, reason=f"no templates in {TEMPLATE_DIR}")

# The templates that cannot render a plain conversation, and why. Everything else must render:
# a template dropping out of the set is a regression.
CANNOT_RENDER = {
    "fireworks-ai-llama-3-firefunction-v2": (
        "reads `functions` and `datetime` variables that only Fireworks' own server passes"
    ),
}
# Templates that never read a `tools` variable (they may still render past tool calls).
NO_TOOLS = {
    "HuggingFaceTB-SmolLM3-3B": "reads `xml_tools` / `python_tools` instead",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "no tool definitions in the prompt",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "no tool definitions in the prompt",
    "deepseek-ai-DeepSeek-V3.1": "no tool definitions in the prompt",
    "fireworks-ai-llama-3-firefunction-v2": "reads `functions` instead",
    "google-gemma-2-2b-it": "no tool support",
    "llama-cpp-rwkv-world": "no tool support",
    "microsoft-Phi-3.5-mini-instruct": "no tool support",
}
# Templates that read `tools` but cannot take OpenAI-style tool definitions.
CANNOT_RENDER_TOOLS = {
    "CohereForAI-c4ai-command-r-plus-tool_use": (
        "wants Cohere's legacy tool format (name/description/parameter_definitions)"
    ),
}

BASIC = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "How are you?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
TOOL_CONVERSATION = [
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": None,
        # Nine alphanumerics: Mistral templates refuse any other id shape.
        "tool_calls": [
            {
                "id": "abcDEF123",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "abcDEF123", "name": "get_weather", "content": "21 C"},
    {"role": "assistant", "content": "It is 21 C."},
    {"role": "user", "content": "Thanks"},
]
PREFILL = [*BASIC, {"role": "assistant", "content": "Sure, here"}]


def load(name: str, **tokens: str) -> ChatTemplate:
    source = (TEMPLATE_DIR / f"{name}.jinja").read_text(encoding="utf-8")
    tokens.setdefault("bos_token", "<s>")
    tokens.setdefault("eos_token", "</s>")
    return ChatTemplate(source, **tokens)


@needs_templates
def test_the_expected_set_renders() -> None:
    assert len(TEMPLATES) == 70
    assert set(CANNOT_RENDER) <= set(TEMPLATES)
    assert len(TEMPLATES) - len(CANNOT_RENDER) >= 67


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_basic_conversation(name: str) -> None:
    template = load(name)
    if name in CANNOT_RENDER:
        with pytest.raises(TemplateError):
            template.render(BASIC)
        return
    prompt = template.render(BASIC)
    for text in ("You are helpful.", "Hi", "Hello!", "How are you?"):
        assert text in prompt


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_tool_conversation(name: str) -> None:
    template = load(name)
    assert template.supports_tools is (name not in NO_TOOLS)
    if name in NO_TOOLS:
        return
    if name in CANNOT_RENDER_TOOLS:
        with pytest.raises(TemplateError):
            template.render(TOOL_CONVERSATION, tools=TOOLS)
        return
    messages = copy.deepcopy(TOOL_CONVERSATION)
    prompt = template.render(messages, tools=TOOLS)
    assert "get_weather" in prompt
    assert "Paris" in prompt
    assert "It is 21 C." in prompt
    assert "{'city': 'Paris'}" not in prompt  # arguments never printed as a Python dict
    assert messages == TOOL_CONVERSATION  # the caller's messages are left alone


@needs_templates
@pytest.mark.parametrize("name", [name for name in TEMPLATES if name not in CANNOT_RENDER])
def test_prefill_ends_with_the_assistant_text(name: str) -> None:
    prompt = load(name).render(PREFILL, add_generation_prompt=False, continue_final_message=True)
    assert prompt.endswith("Sure, here")


@needs_templates
def test_prefill_llama31_exact_tail() -> None:
    prompt = load("meta-llama-Llama-3.1-8B-Instruct", bos_token="<|begin_of_text|>").render(
        PREFILL, add_generation_prompt=False, continue_final_message=True
    )
    assert prompt.endswith(
        "How are you?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nSure, here"
    )
    assert "<|eot_id|>" not in prompt[prompt.rindex("Sure, here") :]


@needs_templates
def test_prefill_keeps_trailing_space_when_the_template_does() -> None:
    messages = [*BASIC, {"role": "assistant", "content": "Sure, "}]
    qwen = load("Qwen-Qwen2.5-7B-Instruct")
    assert qwen.render(messages, add_generation_prompt=False, continue_final_message=True).endswith(
        "<|im_start|>assistant\nSure, "
    )
    # Llama trims message content, so there is no space to keep.
    llama = load("meta-llama-Llama-3.1-8B-Instruct")
    assert llama.render(
        messages, add_generation_prompt=False, continue_final_message=True
    ).endswith("<|end_header_id|>\n\nSure,")


@needs_templates
def test_prefill_with_typed_parts_and_reasoning() -> None:
    messages = [
        {"role": "user", "content": "Q"},
        {
            "role": "assistant",
            "reasoning_content": "Because.",
            "content": [{"type": "text", "text": "The answer"}],
        },
    ]
    prompt = load("Qwen-Qwen3-0.6B").render(
        messages, add_generation_prompt=False, continue_final_message=True
    )
    assert prompt.endswith("<|im_start|>assistant\n<think>\nBecause.\n</think>\n\nThe answer")


def test_empty_prefill_is_a_fresh_assistant_turn() -> None:
    template = ChatTemplate.chatml()
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": ""}]
    assert template.render(
        messages, add_generation_prompt=False, continue_final_message=True
    ) == template.render(messages[:1])


def test_both_generation_prompt_and_continue_is_refused() -> None:
    with pytest.raises(TemplateError, match="Cannot set both add_generation_prompt and continue"):
        ChatTemplate.chatml().render(PREFILL, continue_final_message=True)


def test_two_assistant_messages_at_the_end_cannot_be_continued() -> None:
    messages = [*PREFILL, {"role": "assistant", "content": "more"}]
    with pytest.raises(TemplateError) as caught:
        ChatTemplate.chatml().render(
            messages, add_generation_prompt=False, continue_final_message=True
        )
    assert str(caught.value) == "Cannot have 2 or more assistant messages at the end of the list."


def test_continue_needs_an_assistant_message_last() -> None:
    with pytest.raises(TemplateError, match="assistant"):
        ChatTemplate.chatml().render(
            BASIC, add_generation_prompt=False, continue_final_message=True
        )


def test_template_errors_are_invalid_requests() -> None:
    assert issubclass(TemplateError, InvalidRequestError)


@needs_templates
def test_raise_exception_message_reaches_the_caller() -> None:
    template = load("google-gemma-2-2b-it")
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        template.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_syntax_error_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="syntax error on line 1"):
        ChatTemplate("{% for m in messages %}{{ m.content }}")


def test_undefined_variable_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="failed to render"):
        ChatTemplate("{{ messages[0].content + undefined_thing.x }}").render(BASIC)


@needs_templates
def test_system_role_is_merged_for_templates_that_refuse_it() -> None:
    prompt = load("google-gemma-2-2b-it").render(BASIC)
    assert prompt.startswith("<s><start_of_turn>user\nYou are helpful.\n\nHi<end_of_turn>\n")
    assert prompt.endswith("<start_of_turn>user\nHow are you?<end_of_turn>\n<start_of_turn>model\n")


@needs_templates
def test_firefunction_renders_once_given_its_variables() -> None:
    prompt = load("fireworks-ai-llama-3-firefunction-v2").render(
        BASIC, functions="[]", datetime="2025-01-01"
    )
    assert "Today is 2025-01-01." in prompt


# Typed content parts


PARTS = [
    {"role": "user", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]}
]


@needs_templates
def test_text_parts_are_joined_for_string_templates() -> None:
    prompt = load("meta-llama-Llama-3.1-8B-Instruct").render(PARTS)
    assert "<|end_header_id|>\n\nWh\n\nill<|eot_id|>" in prompt


@needs_templates
@pytest.mark.parametrize("name", ["LFM2-8B-A1B", "GigaChat3-10B-A1.8B", "LFM2.5-Instruct"])
def test_parts_printed_as_json_fall_back_to_joined_text(name: str) -> None:
    prompt = load(name).render(PARTS)
    assert "Wh\n\nill" in prompt
    assert '"type"' not in prompt


@needs_templates
@pytest.mark.parametrize("name", [name for name in TEMPLATES if name not in CANNOT_RENDER])
def test_parts_render_everywhere_without_leaking_structure(name: str) -> None:
    prompt = load(name).render(PARTS)
    assert "Wh" in prompt and "ill" in prompt
    assert "'type'" not in prompt and '"type": "text"' not in prompt


@needs_templates
def test_templates_that_iterate_parts_get_the_parts() -> None:
    # Qwen3.5 walks the list itself and concatenates the texts.
    assert "<|im_start|>user\nWhill<|im_end|>" in load("Qwen3.5-4B").render(PARTS)


def test_non_text_parts_are_refused() -> None:
    image = {"type": "image_url", "image_url": {"url": "http://x/y.png"}}
    with pytest.raises(InvalidRequestError, match="image_url"):
        ChatTemplate.chatml().render([{"role": "user", "content": [image]}])


@pytest.mark.parametrize("bad", [["hi"], [{"content": "no role"}], [{"role": None}]])
def test_malformed_messages_are_invalid_requests(bad: list) -> None:
    with pytest.raises(InvalidRequestError, match="role"):
        ChatTemplate.chatml().render(bad)


def test_content_text_joins_with_blank_line() -> None:
    assert content_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "a\n\nb"
    assert content_text(None) == ""
    assert content_text("plain") == "plain"


# Tool-call arguments: dict first, JSON string when the template wants one


@needs_templates
def test_arguments_reach_templates_as_dicts() -> None:
    prompt = load("Qwen-Qwen3-0.6B").render(TOOL_CONVERSATION, tools=TOOLS)
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in (
        prompt
    )


@needs_templates
def test_arguments_fall_back_to_strings() -> None:
    # functionary v3.2 concatenates the arguments to a string, which fails for a dict.
    prompt = load("meetkai-functionary-medium-v3.2").render(TOOL_CONVERSATION, tools=TOOLS)
    assert '>>>get_weather\n{"city": "Paris"}' in prompt


# Reasoning content and thinking switches


@needs_templates
def test_reasoning_content_reaches_templates_reading_other_names() -> None:
    # Solar reads `message.reasoning`; we alias reasoning_content to it.
    messages = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "reasoning_content": "Because.", "content": "Answer"},
    ]
    prompt = load("upstage-Solar-Open-100B").render(
        messages, add_generation_prompt=False, continue_final_message=True
    )
    assert prompt.endswith(
        "<|begin|>assistant<|think|>Because.<|end|><|begin|>assistant<|content|>Answer"
    )


@needs_templates
def test_enable_thinking_false_closes_the_block() -> None:
    template = load("Qwen-Qwen3-0.6B")
    assert template.supports_enable_thinking
    closed = template.render(BASIC, enable_thinking=False)
    assert closed.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning(closed, template.markers)
    assert not prompt_opens_reasoning(template.render(BASIC), template.markers)


@needs_templates
@pytest.mark.parametrize(
    ("name", "opens"),
    [
        ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", True),
        ("llama-cpp-deepseek-r1", True),
        ("GLM-4.7-Flash", True),
        ("Kimi-K3", True),
        ("Cohere2MoE", True),
        ("Apriel-1.6-15b-Thinker-fixed", True),
        ("deepseek-ai-DeepSeek-V4", False),
        ("google-gemma-4-31B-it", False),
        ("Qwen-Qwen3-0.6B", False),
        ("tencent-Hy3", False),
        ("meta-llama-Llama-3.1-8B-Instruct", False),
    ],
)
def test_prompt_opens_reasoning(name: str, opens: bool) -> None:
    template = load(name)
    assert prompt_opens_reasoning(template.render(BASIC), template.markers) is opens


@needs_templates
@pytest.mark.parametrize(
    ("name", "family", "start", "end"),
    [
        ("Qwen-Qwen3-0.6B", "think", "<think>", "</think>"),
        ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "think", "<think>", "</think>"),
        ("GLM-4.6", "think", "<think>", "</think>"),
        ("MiniMax-M2", "think", "<think>", "</think>"),
        ("openai-gpt-oss-120b", "gpt-oss", "<|channel|>analysis<|message|>", "<|end|>"),
        ("mistralai-Ministral-3-14B-Reasoning-2512", "mistral", "[THINK]", "[/THINK]"),
        ("ByteDance-Seed-OSS", "seed", "<seed:think>", "</seed:think>"),
        ("MiniMax-M3", "minimax", "<mm:think>", "</mm:think>"),
        ("Cohere2MoE", "cohere", "<|START_THINKING|>", "<|END_THINKING|>"),
        (
            "CohereForAI-c4ai-command-r7b-12-2024-tool_use",
            "cohere",
            "<|START_THINKING|>",
            "<|END_THINKING|>",
        ),
        ("Kimi-K3", "kimi-tags", "<|open|>think<|sep|>", "<|close|>think<|sep|>"),
        ("google-gemma-4-31B-it", "gemma", "<|channel>thought", "<channel|>"),
        ("upstage-Solar-Open-100B", "solar", "<|think|>", "<|end|>"),
        ("tencent-Hy3", "hunyuan", "<think:opensource>", "</think:opensource>"),
        ("muse-glimmer", "atem", "to=self<|message|>", "<|eom|>"),
        ("Apertus-8B-Instruct", "apertus", "<|inner_prefix|>", "<|inner_suffix|>"),
        ("unsloth-Apriel-1.5", "apriel", "Here are my reasoning steps:", "[BEGIN FINAL RESPONSE]"),
        ("ibm-granite-granite-3.3-2B-Instruct", "granite", "<think>", "</think>"),
    ],
)
def test_thinking_markers(name: str, family: str, start: str, end: str) -> None:
    markers = load(name).markers
    assert markers is not None
    assert (markers.family, markers.start, markers.end) == (family, start, end)


@needs_templates
@pytest.mark.parametrize(
    "name",
    [
        "meta-llama-Llama-3.1-8B-Instruct",
        "Qwen-Qwen2.5-7B-Instruct",
        "mistralai-Mistral-Nemo-Instruct-2407",
        "google-gemma-2-2b-it",
        "Kimi-K2-Instruct",
        "microsoft-Phi-3.5-mini-instruct",
    ],
)
def test_no_markers_for_models_that_do_not_think(name: str) -> None:
    assert load(name).markers is None


@needs_templates
def test_markers_split_what_the_template_renders() -> None:
    """Templates render past reasoning between the markers the model emits: splitting an
    assistant turn rendered by the template must give back its reasoning and content."""
    messages = [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "reasoning_content": "Pondering deeply.", "content": "Final answer."},
    ]
    checked = []
    for name in TEMPLATES:
        template = load(name)
        markers = template.markers
        if markers is None or markers.family == "apriel":  # Apriel's start is the prompt's
            continue
        prompt = template.render(
            messages,
            add_generation_prompt=False,
            continue_final_message=True,
            enable_thinking=True,
            thinking=True,
        )
        if "Pondering deeply." not in prompt:
            continue  # this template drops reasoning from the turn it renders
        turn = prompt[prompt.rindex(markers.start, 0, prompt.index("Pondering deeply.")) :]
        assert split_reasoning(turn, markers) == ("Pondering deeply.", "Final answer."), name
        checked.append(name)
    assert len(checked) >= 27


@needs_templates
@pytest.mark.parametrize(
    ("name", "toggle"),
    [
        ("Qwen-Qwen3-0.6B", "enable_thinking"),
        ("deepseek-ai-DeepSeek-V3.1", "enable_thinking"),
        ("google-gemma-4-31B-it", "enable_thinking"),
        ("Kimi-K3", "thinking"),
        ("ibm-granite-granite-3.3-2B-Instruct", "thinking"),
        ("Cohere2MoE", "reasoning"),
        ("NVIDIA-Nemotron-Nano-v2", None),  # switched by "/think" in the system prompt instead
        ("LFM2.5-8B-A1B", None),  # mentions only `message.thinking`
        ("meta-llama-Llama-3.1-8B-Instruct", None),
    ],
)
def test_thinking_toggle(name: str, toggle: str | None) -> None:
    source = (TEMPLATE_DIR / f"{name}.jinja").read_text(encoding="utf-8")
    assert thinking_toggle(source) == toggle
    assert supports_enable_thinking(source) is (toggle == "enable_thinking")


def test_thinking_markers_none_for_plain_source() -> None:
    assert thinking_markers(CHATML_TEMPLATE) is None


# The default template and the sandbox's Hugging Face extras


def test_chatml_default() -> None:
    prompt = ChatTemplate.chatml().render(BASIC[:2])
    assert prompt == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert (
        ChatTemplate.chatml()
        .render(BASIC[:2], add_generation_prompt=False)
        .endswith("Hi<|im_end|>\n")
    )


def test_tojson_takes_json_dumps_keywords() -> None:
    template = ChatTemplate(
        "{{ {'b': 'é', 'a': [1, 2]} | tojson(ensure_ascii=True, sort_keys=True, "
        "separators=(',', ':')) }}|{{ {'k': 1} | tojson(indent=2) }}|{{ '<&>' | tojson }}"
    )
    assert template.render([]) == '{"a":[1,2],"b":"\\u00e9"}|{\n  "k": 1\n}|"<&>"'


def test_generation_tag_loop_controls_and_mutable_lists() -> None:
    template = ChatTemplate(
        "{% set seen = [] %}"
        "{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
        "{% generation %}{{ m.content }};{% endgeneration %}"
        "{{ seen.append(m.role) or '' }}"
        "{% if loop.index > 3 %}{% break %}{% endif %}{% endfor %}{{ seen | join(',') }}"
    )
    assert template.render(BASIC) == "Hi;Hello!;How are you?;user,assistant,user"


def test_strftime_now_and_special_tokens() -> None:
    template = ChatTemplate(
        "{{ bos_token }}{{ strftime_now('%Y') | length }}{{ eos_token }}{{ pad_token }}",
        bos_token="<s>",
        eos_token="</s>",
        special_tokens={"pad_token": "<pad>"},
    )
    assert template.render([]) == "<s>4</s><pad>"


def test_templates_are_compiled_once() -> None:
    first = ChatTemplate(CHATML_TEMPLATE)
    second = ChatTemplate(CHATML_TEMPLATE)
    assert first._template is second._template


def test_sandbox_blocks_unsafe_attributes() -> None:
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(TemplateError):
        template.render(BASIC)


@needs_templates
def test_templates_get_todays_date_as_llama_cpp_gives_it():
    """Llama 3.x prints `date_string` (llama.cpp passes today's; the template's own fallback is
    a fixed day in 2024); a caller's value wins."""
    import datetime

    source = (TEMPLATE_DIR / "meta-llama-Llama-3.3-70B-Instruct.jinja").read_text()
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    hi = [{"role": "user", "content": "What is today?"}]
    assert f"Today Date: {datetime.date.today():%d %b %Y}\n" in template.render(hi)
    assert "Today Date: 01 Jan 2030" in template.render(hi, date_string="01 Jan 2030")


def test_llama_cpp_builtin_templates_by_name():
    """`--chat-template gemma` (or any name llama.cpp lists) writes the prompt with llama.cpp's
    own C++ format; text parts joined by a newline; tools are refused, not dropped."""
    from llamactl.engine.chat.builtin import BuiltinTemplate, builtin_template_names

    assert {"llama2", "llama3", "gemma", "mistral-v7", "phi3", "chatml"} <= builtin_template_names()
    gemma = BuiltinTemplate("gemma")
    hi = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "you"}],
        }
    ]
    assert gemma.render(hi) == "<start_of_turn>user\nHi\nyou<end_of_turn>\n<start_of_turn>model\n"
    cont = [*hi, {"role": "assistant", "content": "Hello, fri"}]
    assert gemma.render(cont, add_generation_prompt=False, continue_final_message=True).endswith(
        "<start_of_turn>model\nHello, fri"
    )
    with pytest.raises(TemplateError, match="cannot show tools"):
        gemma.render(hi, tools=[{"type": "function", "function": {"name": "f"}}])
    with pytest.raises(TemplateError, match="not one of"):
        BuiltinTemplate("klingon")
