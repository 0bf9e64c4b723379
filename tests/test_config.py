"""Settings precedence (flags > env > file > defaults) and the errors users see for bad config."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from llamactl.config import (
    SETTING_NAMES,
    Settings,
    Source,
    find_key_line,
    load_settings,
    physical_cores,
)
from llamactl.config.fields import SERVE_CHAT_ANSWER_TOKENS
from llamactl.core import paths
from llamactl.core.errors import ConfigError


def write_config(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def config_file(isolated_dirs) -> Path:
    """The default config location under the isolated XDG_CONFIG_HOME (not yet written)."""
    return isolated_dirs.config_file


# --- defaults and paths --------------------------------------------------------------------


def test_defaults_without_any_config(isolated_dirs) -> None:
    s = load_settings({})
    assert s.model is None
    assert s.models_dir == isolated_dirs.models_dir
    assert s.aliases == {}
    assert (s.n_ctx, s.parallel, s.batch_size) == (0, 4, 512)  # n_ctx 0: sized from the model
    assert s.threads == physical_cores() >= 1
    assert (s.temperature, s.top_p, s.top_k, s.min_p) == (0.8, 0.95, 40, 0.05)
    assert s.seed is None and s.max_tokens is None and s.system is None
    assert (s.host, s.port) == ("127.0.0.1", 8080)
    assert s.api_key == [] and s.api_key_file is None
    assert s.sse_ping_interval == 30
    assert s.metrics is False and s.kv_unified is False
    assert s.max_queue == 64
    assert s.alias is None
    assert s.flash_attn == "on"
    assert s.chat_template_file is None
    assert s.config_file is None
    assert all(source == Source("default") for source in s.sources.values())


def test_load_settings_with_no_arguments() -> None:
    assert load_settings() == load_settings({})


def test_xdg_paths_follow_the_environment(isolated_dirs, monkeypatch) -> None:
    assert paths.config_path() == isolated_dirs.config_file
    assert paths.default_models_dir() == isolated_dirs.models_dir
    assert paths.cache_dir() == isolated_dirs.cache_home / "llamactl"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/dir")  # the spec says: ignore it
    assert paths.config_path() == Path.home() / ".config" / "llamactl" / "config.toml"
    monkeypatch.setenv("LLAMACTL_CONFIG", "~/elsewhere.toml")
    assert paths.config_path() == Path.home() / "elsewhere.toml"


# --- the config file -----------------------------------------------------------------------


def test_file_values_and_their_sources(config_file: Path) -> None:
    write_config(
        config_file,
        textwrap.dedent("""
        # a comment
        model = "qwen"
        n_ctx = 8192
        temperature = 0
        api_key = "secret"
        metrics = true
        flash_attn = "AUTO"
        sse-ping-interval = 2.5

        [aliases]
        qwen = "~/models/qwen.gguf"
        """),
    )
    s = load_settings({})
    assert s.config_file == config_file
    assert s.model == "qwen"
    assert s.n_ctx == 8192
    assert s.temperature == 0.0 and isinstance(s.temperature, float)
    assert s.api_key == ["secret"]
    assert s.metrics is True
    assert s.flash_attn == "auto"
    assert s.sse_ping_interval == 2.5
    assert s.aliases == {"qwen": str(Path.home() / "models" / "qwen.gguf")}
    assert s.sources["n_ctx"] == Source("file", f"{config_file}:4")
    assert s.sources["aliases"] == Source("file", f"{config_file}:11")
    assert s.sources["port"] == Source("default")


def test_kebab_case_and_ctx_size_alias(config_file: Path) -> None:
    write_config(
        config_file, "ctx-size = 1024\nmax-queue = 3\nkv-unified = true\nflash_attn = false\n"
    )
    s = load_settings({})
    assert (s.n_ctx, s.max_queue, s.kv_unified, s.flash_attn) == (1024, 3, True, "off")


def test_relative_paths_in_the_file_are_relative_to_it(config_file: Path) -> None:
    write_config(
        config_file,
        'models_dir = "models"\napi_key_file = "keys.txt"\nchat_template_file = "/abs.jinja"\n',
    )
    s = load_settings({})
    assert s.models_dir == config_file.parent / "models"
    assert s.api_key_file == config_file.parent / "keys.txt"
    assert s.chat_template_file == Path("/abs.jinja")


def test_llamactl_config_selects_another_file(tmp_path: Path, config_file, monkeypatch) -> None:
    write_config(config_file, "port = 1111\n")
    other = write_config(tmp_path / "other.toml", "port = 2222\n")
    monkeypatch.setenv("LLAMACTL_CONFIG", str(other))
    s = load_settings({})
    assert s.port == 2222
    assert s.config_file == other
    explicit = write_config(tmp_path / "explicit.toml", "port = 3333\n")
    assert load_settings({}, config_path=explicit).port == 3333  # a --config flag wins


def test_explicitly_named_config_must_exist(tmp_path: Path, monkeypatch) -> None:
    missing = tmp_path / "nope.toml"
    monkeypatch.setenv("LLAMACTL_CONFIG", str(missing))
    with pytest.raises(ConfigError, match="does not exist") as err:
        load_settings({})
    assert str(missing) in str(err.value)
    monkeypatch.delenv("LLAMACTL_CONFIG")
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings({}, config_path=missing)


def test_unknown_key_names_file_key_and_line(config_file: Path) -> None:
    write_config(config_file, "port = 8000\n\n# comment\ntemprature = 0.5\n")
    with pytest.raises(ConfigError) as err:
        load_settings({})
    message = str(err.value)
    assert str(config_file) in message
    assert "'temprature'" in message
    assert "line 4" in message
    assert "did you mean 'temperature'" in message


def test_unknown_table_points_at_its_header(config_file: Path) -> None:
    write_config(config_file, "port = 8000\n[server]\nport = 9000\n")
    with pytest.raises(ConfigError, match=r"line 2: unknown key 'server'"):
        load_settings({})


@pytest.mark.parametrize(
    ("text", "key", "line", "expected"),
    [
        ('host = "x"\nport = "eighty"\n', "port", 2, "expected an integer, got string 'eighty'"),
        ("port = true\n", "port", 1, "expected an integer, got boolean True"),
        ('\n\nmetrics = "yes"\n', "metrics", 3, "expected true or false"),
        ("temperature = [1]\n", "temperature", 1, "expected a number"),
        ("system = 3\n", "system", 1, "expected a string"),
        ('flash_attn = "fast"\n', "flash_attn", 1, "expected one of 'auto', 'on', 'off'"),
        ("api_key = [1, 2]\n", "api_key", 1, "expected a string or a list of strings"),
        ('aliases = "x"\n', "aliases", 1, "expected a table"),
    ],
)
def test_wrong_type_names_file_key_and_line(
    config_file: Path, text: str, key: str, line: int, expected: str
) -> None:
    write_config(config_file, text)
    with pytest.raises(ConfigError) as err:
        load_settings({})
    message = str(err.value)
    assert str(config_file) in message
    assert f"line {line}" in message
    assert f"{key!r}" in message
    assert expected in message


def test_bad_alias_value_points_at_the_alias_line(config_file: Path) -> None:
    write_config(config_file, 'port = 1\n\n[aliases]\ngood = "a.gguf"\nbad = 7\n')
    with pytest.raises(ConfigError, match=r"line 5: invalid value for aliases\.bad"):
        load_settings({})


def test_duplicate_spellings_are_rejected(config_file: Path) -> None:
    write_config(config_file, "n_ctx = 1\nctx-size = 2\n")
    with pytest.raises(ConfigError, match=r"line 2: 'ctx-size' repeats 'n_ctx'"):
        load_settings({})


def test_toml_syntax_error_names_file_and_line(config_file: Path) -> None:
    write_config(config_file, 'port = 8000\nhost = "unterminated\n')
    with pytest.raises(ConfigError) as err:
        load_settings({})
    assert str(config_file) in str(err.value)
    assert "not valid TOML" in str(err.value)
    assert "line 2" in str(err.value)


def test_non_utf8_file(config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_bytes(b'system = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_settings({})


def test_out_of_range_values_name_their_source(config_file: Path, monkeypatch) -> None:
    write_config(config_file, "port = 70000\n")
    with pytest.raises(ConfigError, match=r"port must be between 0 and 65535, got 70000") as err:
        load_settings({})
    assert f"{config_file}:1" in str(err.value)
    config_file.unlink()
    monkeypatch.setenv("LLAMACTL_TOP_P", "1.5")
    with pytest.raises(ConfigError, match=r"top_p .* \(from env \(LLAMACTL_TOP_P\)\)"):
        load_settings({})
    monkeypatch.delenv("LLAMACTL_TOP_P")
    with pytest.raises(ConfigError, match="parallel must be >= 1"):
        load_settings({"parallel": 0})


def test_find_key_line() -> None:
    text = 'a = 1\n"quoted" = 2\n[tbl]\nx.y = 3\n  [ other ]\n'
    assert find_key_line(text, "a") == 1
    assert find_key_line(text, "quoted") == 2
    assert find_key_line(text, "tbl") == 3
    assert find_key_line(text, "x") == 4
    assert find_key_line(text, "other") == 5
    assert find_key_line(text, "missing") is None
    assert find_key_line(text, "a", start_line=2) is None


# --- environment variables -----------------------------------------------------------------


def test_env_values_are_parsed(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LLAMACTL_MODEL", "m.gguf")
    monkeypatch.setenv("LLAMACTL_MODELS_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("LLAMACTL_CTX_SIZE", "2048")
    monkeypatch.setenv("LLAMACTL_TEMPERATURE", "0.2")
    monkeypatch.setenv("LLAMACTL_METRICS", "yes")
    monkeypatch.setenv("LLAMACTL_KV_UNIFIED", "0")
    monkeypatch.setenv("LLAMACTL_API_KEY", "k1, k2,")
    monkeypatch.setenv("LLAMACTL_FLASH_ATTN", "false")
    monkeypatch.setenv("LLAMACTL_SEED", "")  # empty means unset
    s = load_settings({})
    assert s.model == "m.gguf"
    assert s.models_dir == tmp_path / "models"
    assert s.n_ctx == 2048
    assert s.temperature == 0.2
    assert s.metrics is True and s.kv_unified is False
    assert s.api_key == ["k1", "k2"]
    assert s.flash_attn == "off"
    assert s.seed is None
    assert s.sources["n_ctx"] == Source("env", "LLAMACTL_CTX_SIZE")
    assert s.sources["seed"] == Source("default")


@pytest.mark.parametrize(
    ("var", "value"),
    [
        ("LLAMACTL_PORT", "eighty"),
        ("LLAMACTL_METRICS", "maybe"),
        ("LLAMACTL_TOP_P", "high"),
        ("LLAMACTL_FLASH_ATTN", "fast"),
    ],
)
def test_bad_env_value_names_the_variable(monkeypatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=f"environment variable {var}: expected"):
        load_settings({})


def test_two_env_spellings_conflict(monkeypatch) -> None:
    monkeypatch.setenv("LLAMACTL_N_CTX", "1")
    monkeypatch.setenv("LLAMACTL_CTX_SIZE", "2")
    with pytest.raises(ConfigError, match="LLAMACTL_N_CTX and LLAMACTL_CTX_SIZE"):
        load_settings({})


def test_llama_servers_variables_carry_over(monkeypatch) -> None:
    """A deployment's LLAMA_ARG_* environment sets the same settings; LLAMACTL_* wins."""
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "2048")
    monkeypatch.setenv("LLAMA_ARG_N_PARALLEL", "3")
    monkeypatch.setenv("LLAMA_ARG_ENDPOINT_METRICS", "1")
    monkeypatch.setenv("LLAMA_API_KEY", "secret")
    monkeypatch.setenv("LLAMA_ARG_PORT", "9000")
    monkeypatch.setenv("LLAMACTL_PORT", "9100")
    s = load_settings({})
    assert (s.n_ctx, s.parallel, s.metrics, s.api_key) == (2048, 3, True, ["secret"])
    assert s.port == 9100 and s.sources["port"] == Source("env", "LLAMACTL_PORT")
    assert s.sources["n_ctx"] == Source("env", "LLAMA_ARG_CTX_SIZE")
    monkeypatch.setenv("LLAMA_ARG_TEMPERATURE", "hot")
    with pytest.raises(ConfigError, match="environment variable LLAMA_ARG_TEMPERATURE"):
        load_settings({})


def test_unrelated_llamactl_variables_are_ignored(monkeypatch) -> None:
    monkeypatch.setenv("LLAMACTL_SOMETHING_ELSE", "x")
    assert load_settings({}).port == 8080


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("LLAMACTL_TEMPERTURE", "LLAMACTL_TEMPERATURE"), ("LLAMACTL_CTX_SISE", "LLAMACTL_CTX_SIZE")],
)
def test_misspelt_variable_is_an_error_with_the_right_name(monkeypatch, typo, meant) -> None:
    monkeypatch.setenv(typo, "0.1")
    with pytest.raises(ConfigError, match=f"{typo} is not a setting; did you mean {meant}"):
        load_settings({})


# --- precedence ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("use_file", "env", "cli", "expected", "kind"),
    [
        (False, None, None, 8080, "default"),
        (True, None, None, 9000, "file"),
        (True, "9001", None, 9001, "env"),
        (False, "9001", None, 9001, "env"),
        (True, "9001", 9002, 9002, "cli"),
        (True, None, 9002, 9002, "cli"),
        (False, None, 9002, 9002, "cli"),
    ],
)
def test_precedence_flags_env_file_defaults(
    config_file: Path, monkeypatch, use_file: bool, env, cli, expected: int, kind: str
) -> None:
    if use_file:
        write_config(config_file, "port = 9000\n")
    if env is not None:
        monkeypatch.setenv("LLAMACTL_PORT", env)
    s = load_settings({"port": cli})
    assert s.port == expected
    assert s.sources["port"].kind == kind


def test_precedence_is_per_setting(config_file: Path, monkeypatch) -> None:
    write_config(config_file, 'host = "0.0.0.0"\nport = 9000\ntop_k = 5\n')
    monkeypatch.setenv("LLAMACTL_PORT", "9001")
    monkeypatch.setenv("LLAMACTL_TOP_K", "6")
    s = load_settings({"top_k": 7, "temperature": None})
    assert (s.host, s.port, s.top_k, s.temperature) == ("0.0.0.0", 9001, 7, 0.8)
    kinds = {name: source.kind for name, _, source in s.explain()}
    assert kinds["host"] == "file" and kinds["port"] == "env" and kinds["top_k"] == "cli"
    assert kinds["temperature"] == "default"


# --- CLI overrides -------------------------------------------------------------------------


def test_cli_values_are_checked(tmp_path: Path) -> None:
    s = load_settings({"ctx-size": "512", "models_dir": str(tmp_path), "api_key": ["a"]})
    assert s.n_ctx == 512
    assert s.models_dir == tmp_path
    assert s.api_key == ["a"]
    assert s.sources["n_ctx"] == Source("cli", "--ctx-size")
    with pytest.raises(ConfigError, match="invalid value for --port: expected an integer"):
        load_settings({"port": "x"})
    with pytest.raises(ValueError, match="unknown setting 'verbose'"):
        load_settings({"verbose": True})


# --- helpers on Settings -------------------------------------------------------------------


def test_explain_lists_every_setting_with_its_source(monkeypatch) -> None:
    monkeypatch.setenv("LLAMACTL_PORT", "9001")
    rows = load_settings({}).explain()
    assert [name for name, _, _ in rows] == list(SETTING_NAMES)
    assert ("port", 9001, Source("env", "LLAMACTL_PORT")) in rows
    assert "sources" not in SETTING_NAMES and "config_file" not in SETTING_NAMES
    assert str(Source("env", "LLAMACTL_PORT")) == "env (LLAMACTL_PORT)"
    assert str(Source("default")) == "default"


def test_resolved_api_keys_reads_the_key_file(tmp_path: Path) -> None:
    keys = tmp_path / "keys.txt"
    keys.write_text("# team keys\nk2\n\n  k3  \n")
    s = load_settings({"api_key": ["k1"], "api_key_file": str(keys)})
    assert s.resolved_api_keys() == ["k1", "k2", "k3"]
    s = load_settings({"api_key_file": str(tmp_path / "missing.txt")})
    with pytest.raises(ConfigError, match="cannot read api_key_file"):
        s.resolved_api_keys()


def test_settings_equality_ignores_bookkeeping(monkeypatch) -> None:
    a = load_settings({})
    monkeypatch.setenv("LLAMACTL_PORT", "8080")
    b = load_settings({})
    assert a == b and a.sources != b.sources
    assert isinstance(a, Settings)


def test_a_served_chat_answer_is_bounded_unless_the_user_lifts_the_limit(isolated_dirs) -> None:
    assert load_settings().chat_answer_limit() == SERVE_CHAT_ANSWER_TOKENS  # aider sends none
    assert load_settings({"max_tokens": 300}).chat_answer_limit() == 300
    assert load_settings({"max_tokens": -1}).chat_answer_limit() is None  # llama-server's
