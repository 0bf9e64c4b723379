"""The `systemone` chat templates each decision type embeds in its GGUF.

The server renders `tokenizer.chat_template.systemone` once per question with these globals:
`id`, `type` (choice | score | noul), `instructions`, `state`, `options` (a list of
{key, description, label}), `images` (media markers), and for lfm2-d1-omni also `audio`,
`sep`, `mark_state`, `mark_question`, `mark_option`. The templates write the prompt layouts of
the spec (section 5.7). Each is a single line: newlines are `{{ '\\n' }}` expressions, so the
renderer's trim/lstrip settings cannot change the output. A checkpoint that carries its own
`systemone` template (a `systemone.jinja` file, or a template of that name in
tokenizer_config.json) keeps it instead.
"""

from __future__ import annotations

import json

NL = "{{ '\\n' }}"


def text(expr: str) -> str:
    """A value as the model saw it in training: strings as they are, anything else as JSON."""
    return "{{ " + expr + " if " + expr + " is string else " + expr + " | tojson }}"


def text_indented(expr: str) -> str:
    return "{{ " + expr + " if " + expr + " is string else " + expr + " | tojson(indent=2) }}"


def _has(expr: str) -> str:
    return f"{expr} is not none and {expr} != ''"


IMAGES = "{% for image in images %}{{ image }}{% endfor %}"
THINK_CLOSED = f"<|im_start|>assistant{NL}<think>{NL}{NL}</think>{NL}{NL}"
NOUL_NAME = "{{ 'yes' if o.key == 'true' else 'no' }}"


OPENJEV_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
OPENJEV_NOUL_DEFAULT = (
    "{% if o.key == 'true' %}The statement is true.{% else %}The statement is false.{% endif %}"
)


def openjev() -> str:
    """OpenJev's layout (its helper/shim.py, as llama.cpp writes it): Qwen chat, thinking
    closed, one `[A] name: description` line per option. The letters come from the option's
    position (llama-server passes no `label` for openjev); a noul without descriptions says
    what yes and no mean; a prompt with images says they show the current screen."""
    name = "{% if type == 'noul' %}" + NOUL_NAME + "{% else %}{{ o.key }}{% endif %}"
    described = (
        "{% if o.description %}"
        + text("o.description")
        + "{% elif type == 'noul' %}"
        + OPENJEV_NOUL_DEFAULT
        + "{% endif %}"
    )
    option = "[{{ '" + OPENJEV_LETTERS + "'[loop.index0] }}] " + name + ": " + described + NL
    screen = "{% if images %}The screenshot shows the current screen." + NL + "{% endif %}"
    return (
        f"<|im_start|>user{NL}" + IMAGES + screen + f"State:{NL}" + text("state") + f"{NL}{NL}"
        "Question: "
        + text("instructions")
        + "{% if type == 'score' %} Rate along the ordered levels below (lowest first).{% endif %}"
        + f"{NL}Options:{NL}"
        + "{% for o in options %}"
        + option
        + "{% endfor %}"
        + f"{NL}Answer with the letter of the best option only.<|im_end|>{NL}"
        + THINK_CLOSED
    )


LEV_SYSTEM = (
    "You are a System One decision model. You read the Evidence and answer each Criterion by "
    "choosing exactly one of the listed options. You never explain. You answer with the single "
    "option label only."
)


def lev() -> str:
    """Lev's chat prompt: Evidence, Criterion (the question's id when the instructions are
    empty, as llama.cpp's template does), then lettered options or the 0-8 scale."""
    desc = text("o.description")
    options = (
        f"# Options{NL}" + "{% for o in options %}{{ o.label }}. "
        "{% if type == 'score' %}(level {{ o.key }} of {{ options | length - 1 }}) "
        + desc
        + "{% else %}{{ o.key }}{% if o.description %}: "
        + desc
        + "{% endif %}{% endif %}"
        + NL
        + "{% endfor %}"
        + NL
        + "Respond with only the letter of "
        "{% if type == 'score' %}the level that best matches.{% else %}the best option.{% endif %}"
    )
    scale = f"# Scale{NL}0 = certainly no ... 8 = certainly yes{NL}"
    for key, word in (("true", "yes"), ("false", "no")):
        scale += (
            "{% for o in options %}{% if o.key == '"
            + key
            + "' and o.description %}"
            + word
            + ": "
            + desc
            + NL
            + "{% endif %}{% endfor %}"
        )
    scale += f"{NL}Respond with only a digit from 0 to 8."
    return (
        f"<|im_start|>system{NL}{LEV_SYSTEM}<|im_end|>{NL}<|im_start|>user{NL}# Evidence{NL}"
        + text("state")
        + f"{NL}{NL}# Criterion{NL}"
        + "{% if instructions %}"
        + text("instructions")
        + "{% else %}{{ id }}{% endif %}"  # empty instructions: the question's id stands in
        + NL
        + NL
        + "{% if type == 'noul' %}"
        + scale
        + "{% else %}"
        + options
        + "{% endif %}"
        + f"{NL}<|im_end|>{NL}"
        + THINK_CLOSED
    )


def kev() -> str:
    """Kev's fill-in-the-middle layout; one `<|box_end|>` per option is the pointer marker.
    The server passes the state and instructions already flattened to text."""
    name = "{% if type != 'noul' %}{{ o.key }}{% else %}" + NOUL_NAME + "{% endif %}"
    option = (
        "{% if type == 'score' %}{% if o.description %}{{ o.description }}{% endif %}"
        "{% else %}" + name + "{% if o.description %}: {{ o.description }}{% endif %}{% endif %}"
    )
    return (
        "<|fim_prefix|>{{ state }}<|fim_middle|>{{ instructions }}"
        "{% for o in options %}<|box_start|>" + option + "<|box_end|>{% endfor %}"
        "<|fim_suffix|>"
    )


def lfm2_d1() -> str:
    """d1's flat chat prompt; the state block is left out when the state is null."""
    desc = text("o.description")
    choice = (
        f"{NL}{NL}Options:" + "{% for o in options %}" + NL + "{{ o.label }} "
        "{% if "
        + _has("o.description")
        + " %}"
        + desc
        + "{% else %}{{ o.key | replace('_', ' ') }}{% endif %}{% endfor %}"
        + f"{NL}{NL}Reply with the option code only."
    )
    noul = (
        "{% set ns = namespace(described=false) %}{% for o in options %}"
        "{% if o.description is not none %}{% set ns.described = true %}{% endif %}{% endfor %}"
        "{% if ns.described %}{% for o in options %}"
        + NL
        + "{{ 'Yes' if o.key == 'true' else 'No' }}: "
        "{% if o.description is not none %}" + desc + "{% else %}None{% endif %}"
        "{% endfor %}{% endif %}" + f"{NL}{NL}Reply with yes or no only."
    )
    score = (
        f"{NL}{NL}" + "{% for o in options %}{% if not loop.first %}" + NL + "{% endif %}"
        "{{ o.key }} "
        + desc
        + "{% endfor %}"
        + f"{NL}{NL}Reply with a single digit 0-"
        + "{{ options | length - 1 }} only."
    )
    return (
        f"<|startoftext|><|im_start|>user{NL}"
        + IMAGES
        + "{% if state is not none %}"
        + text_indented("state")
        + f"{NL}{NL}{NL}QUESTION:{NL}"
        + "{% endif %}"
        + text("instructions")
        + "{% if type == 'choice' %}"
        + choice
        + "{% elif type == 'noul' %}"
        + noul
        + "{% else %}"
        + score
        + "{% endif %}"
        + f"<|im_end|>{NL}<|im_start|>assistant{NL}"
    )


def lfm2_d1_omni() -> str:
    """d1-omni's pieces, joined by `sep` (the server tokenizes each piece on its own); one
    `<|mask|>` marker per option."""
    desc = text("o.description")
    option_text = (
        "{% if type == 'noul' %}"
        + NOUL_NAME
        + "{% if o.description is not none %}: "
        + desc
        + "{% endif %}"
        "{% elif type == 'score' %}{% if o.description is not none %}"
        + desc
        + "{% else %}{{ o.key }}{% endif %}"
        "{% else %}{{ o.key }}{% if o.description is not none %}: " + desc + "{% endif %}"
        "{% endif %}"
    )
    return (
        IMAGES + "{{ sep }}<|startoftext|><|reserved_7|>{{ sep }}{{ mark_state }}"
        "{% if state is not none %}" + text("state") + "{% endif %}"
        "{{ sep }}{{ mark_question }}<|reserved_8|>"
        + text("instructions")
        + "{% for o in options %}{{ sep }}<|reserved_9|><|mask|>{{ sep }}{{ mark_option }} "
        + option_text
        + "{{ sep }}<|reserved_10|>{% endfor %}{{ sep }}<|reserved_11|>"
    )


def minicpm_ocr_jev() -> str:
    """The fixed OCR check: the image, then the OCR text; the value head reads the last token."""
    return (
        f"<|im_start|>user{NL}"
        + IMAGES
        + f"{NL}OCR text:{NL}"
        + text("state")
        + f"<|im_end|>{NL}<|im_start|>assistant{NL}"
    )


def _literal(s: str) -> str:
    """Fixed text from a checkpoint's config, as a Jinja string expression."""
    return "{{ " + json.dumps(s, ensure_ascii=False) + " }}"


H2O_NOUL_TRUE = "the statement holds"
H2O_NOUL_FALSE = "it does not"


def h2o_lightning(
    *,
    system: str | None,
    layout: str = "plain",
    state_compact: bool = True,
    prefill: str = "Answer:",
    default_instructions: str = "Answer the question below.",
) -> str:
    """H2O-Lightning's prompt from its `serve_config.json`: the system prompt, the user turn in
    the "plain" (or "markdown") layout with one `A) name: description` line per option, the
    think block closed, then the answer prefill; the answer is one label token."""
    if layout not in ("plain", "markdown"):
        raise ValueError(f"layout {layout!r} is not supported (plain, markdown)")
    dump = "separators=(',', ':')" if state_compact else "indent=1, ensure_ascii=true"
    state = "{{ state if state is string else state | tojson(" + dump + ") }}"
    instructions = (
        "{% set instr = (instructions if instructions is string else "
        "instructions | tojson(indent=1, ensure_ascii=true)).lstrip() %}"
        "{{ instr if instr else " + json.dumps(default_instructions, ensure_ascii=False) + " }}"
    )
    desc = "{{ o.description if o.description is string else o.description | tojson }}"
    option = (
        "{{ o.label }}) {{ o.key }}: {% if type == 'noul' %}"
        "{% if o.description is not none and o.description != '' %}" + desc + "{% elif "
        f"o.key == 'true' %}}{H2O_NOUL_TRUE}{{% else %}}{H2O_NOUL_FALSE}{{% endif %}}"
        "{% elif o.description is none and type == 'choice' %}{{ o.key }}"
        "{% else %}" + desc + "{% endif %}"
    )
    body = "{% for o in options %}{% if not loop.first %}" + NL + "{% endif %}" + option
    body += "{% endfor %}"
    if layout == "plain":
        user = f"record: {state}{NL}question: {instructions}{NL}options:{NL}{body}"
    else:
        user = (
            f"### RECORD{NL}{state}{NL}{NL}### QUESTION{NL}{instructions}{NL}{NL}"
            f"### OPTIONS{NL}{body}{NL}"
        )
    head = ""
    if system and system.strip():
        head = f"<|im_start|>system{NL}" + _literal(system.strip()) + f"<|im_end|>{NL}"
    return (
        head
        + "{% set user %}"
        + user
        + "{% endset %}"
        + f"<|im_start|>user{NL}"
        + "{{ user | trim }}"
        + f"<|im_end|>{NL}"
        + THINK_CLOSED
        + _literal(prefill)
    )


BUILTIN = {
    "openjev": openjev,
    "lev": lev,
    "kev": kev,
    "lfm2-d1": lfm2_d1,
    "lfm2-d1-omni": lfm2_d1_omni,
    "openbmb-minicpm-ocr-jev": minicpm_ocr_jev,
}


def builtin(decision_type: str) -> str:
    return BUILTIN[decision_type]()
