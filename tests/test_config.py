"""Settings layering: defaults < TOML file < env vars < CLI flags, with a source per value.

Every call passes `env=` explicitly so the developer's own environment never leaks in.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from clawrl_app.config import (
    UPSTREAM_ENV,
    ConfigError,
    Settings,
    describe,
    load_settings,
)


def write_toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


# --- defaults ---------------------------------------------------------------------------


def test_defaults_without_any_layer() -> None:
    loaded = load_settings(env={})
    s = loaded.settings
    assert s.server.host == "127.0.0.1"
    assert s.server.port == 30000
    assert s.server.model_alias == "clawrl"
    assert s.server.require_api_key is False
    assert s.model.path is None
    assert s.hardware.backend == "auto"
    assert s.train.method == "combine"
    assert s.review.mode == "auto"
    assert loaded.sources == {}
    assert loaded.source_of("server.port") == "default"


def test_missing_config_file_means_defaults(tmp_path: Path) -> None:
    loaded = load_settings(tmp_path / "absent.toml", env={})
    assert loaded.settings == Settings()
    assert loaded.sources == {}


def test_settings_are_frozen() -> None:
    s = load_settings(env={}).settings
    with pytest.raises(ValidationError):
        s.server.port = 1  # type: ignore[misc]


# --- TOML layer ---------------------------------------------------------------------------


def test_toml_values_and_sources(tmp_path: Path) -> None:
    path = write_toml(
        tmp_path,
        '[server]\nport = 31000\nmodel_alias = "mine"\n\n[train]\nmethod = "rl"\nlr = 2e-5\n',
    )
    loaded = load_settings(path, env={})
    assert loaded.settings.server.port == 31000
    assert loaded.settings.server.model_alias == "mine"
    assert loaded.settings.train.method == "rl"
    assert loaded.settings.train.lr == 2e-5
    assert loaded.source_of("server.port") == f"file {path}"
    assert loaded.source_of("train.method") == f"file {path}"
    assert loaded.source_of("server.host") == "default"


def test_invalid_toml_syntax(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[server\nport = 1\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    msg = str(err.value)
    assert str(path) in msg
    assert "not valid TOML" in msg


def test_toml_top_level_key_must_be_a_table(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "port = 1\n")
    with pytest.raises(ConfigError, match=r"'port' .* must be a \[section\] table"):
        load_settings(path, env={})


def test_toml_unknown_key_names_file_and_allowed_keys(tmp_path: Path) -> None:
    path = write_toml(tmp_path, "[server]\nbogus = 1\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    msg = str(err.value)
    assert "server.bogus" in msg
    assert f"file {path}" in msg
    assert "port" in msg and "model_alias" in msg


def test_toml_invalid_value_names_key_file_and_allowed(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[train]\nmethod = "foo"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, env={})
    msg = str(err.value)
    assert "train.method" in msg
    assert f"file {path}" in msg
    assert "combine" in msg and "topk-opd" in msg


# --- env layer ----------------------------------------------------------------------------


def test_env_section_key_names() -> None:
    env = {
        "CLAWRL_SERVER__PORT": "31234",
        "CLAWRL_SERVER__MODEL_ALIAS": "alias2",
        "CLAWRL_SERVER__REQUIRE_API_KEY": "true",
        "CLAWRL_JUDGE__TEMPERATURE": "0.25",
        "CLAWRL_TRAIN__BATCH_SIZE": "8",
    }
    loaded = load_settings(env=env)
    s = loaded.settings
    assert s.server.port == 31234
    assert s.server.model_alias == "alias2"
    assert s.server.require_api_key is True
    assert s.judge.temperature == 0.25
    assert s.train.batch_size == 8
    assert loaded.source_of("server.model_alias") == "env CLAWRL_SERVER__MODEL_ALIAS"
    assert loaded.source_of("train.batch_size") == "env CLAWRL_TRAIN__BATCH_SIZE"


def test_env_without_section_separator_is_ignored() -> None:
    # CLAWRL_HOME and CLAWRL_TEST_CACHE are real variables, not settings.
    loaded = load_settings(env={"CLAWRL_HOME": "/x", "CLAWRL_TEST_CACHE": "/y", "HOME": "/h"})
    assert loaded.sources == {}
    assert loaded.settings == Settings()


def test_empty_env_value_counts_as_unset() -> None:
    loaded = load_settings(env={"CLAWRL_MODEL__PATH": "", "CLAWRL_TRAIN__LR": "", "PORT": ""})
    assert loaded.settings.model.path is None
    assert loaded.settings.train.lr is None
    assert loaded.settings.server.port == 30000
    assert loaded.source_of("model.path") == "default"
    assert loaded.source_of("server.port") == "default"


# name -> (section, key, raw env value, expected parsed value)
UPSTREAM_CASES: dict[str, tuple[str, str, str, object]] = {
    "MODEL_PATH": ("model", "path", "/models/qwen", "/models/qwen"),
    "PRM_MODEL_PATH": ("judge", "model_path", "/models/prm", "/models/prm"),
    "NUM_GPUS": ("hardware", "num_gpus", "4", 4),
    "ACTOR_GPUS": ("hardware", "actor_gpus", "2", 2),
    "ROLLOUT_GPUS": ("hardware", "rollout_gpus", "1", 1),
    "PRM_GPUS": ("hardware", "prm_gpus", "0", 0),
    "PORT": ("server", "port", "8080", 8080),
}


def test_upstream_names_are_exactly_the_documented_ones() -> None:
    assert set(UPSTREAM_ENV) == set(UPSTREAM_CASES)


@pytest.mark.parametrize("name", sorted(UPSTREAM_CASES))
def test_upstream_env_name(name: str) -> None:
    section, key, raw, expected = UPSTREAM_CASES[name]
    loaded = load_settings(env={name: raw})
    assert getattr(getattr(loaded.settings, section), key) == expected
    assert loaded.source_of(f"{section}.{key}") == f"env {name}"


def test_prefixed_env_name_beats_upstream_name() -> None:
    loaded = load_settings(env={"PORT": "1111", "CLAWRL_SERVER__PORT": "2222"})
    assert loaded.settings.server.port == 2222
    assert loaded.source_of("server.port") == "env CLAWRL_SERVER__PORT"


# --- precedence ---------------------------------------------------------------------------


def test_precedence_defaults_toml_env_cli(tmp_path: Path) -> None:
    path = write_toml(tmp_path, '[server]\nport = 1001\nmodel_alias = "from-file"\n')
    env = {"CLAWRL_SERVER__PORT": "1002"}

    only_file = load_settings(path, env={})
    assert only_file.settings.server.port == 1001

    file_env = load_settings(path, env=env)
    assert file_env.settings.server.port == 1002
    assert file_env.source_of("server.port") == "env CLAWRL_SERVER__PORT"
    # The env layer overrides only what it sets.
    assert file_env.settings.server.model_alias == "from-file"
    assert file_env.source_of("server.model_alias") == f"file {path}"

    all_layers = load_settings(path, env=env, cli={"server.port": 1003})
    assert all_layers.settings.server.port == 1003
    assert all_layers.source_of("server.port") == "flag --port"
    assert all_layers.settings.server.model_alias == "from-file"


def test_cli_none_values_are_ignored() -> None:
    loaded = load_settings(env={"CLAWRL_SERVER__PORT": "1002"}, cli={"server.port": None})
    assert loaded.settings.server.port == 1002
    assert loaded.source_of("server.port") == "env CLAWRL_SERVER__PORT"


def test_cli_source_uses_dashed_flag_name() -> None:
    loaded = load_settings(env={}, cli={"server.model_alias": "x"})
    assert loaded.source_of("server.model_alias") == "flag --model-alias"


# --- errors -------------------------------------------------------------------------------


def test_invalid_env_value_names_key_source_and_allowed() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={"CLAWRL_TRAIN__METHOD": "foo"})
    msg = str(err.value)
    assert "train.method" in msg
    assert "env CLAWRL_TRAIN__METHOD" in msg
    assert "'foo'" in msg
    for allowed in ("rl", "opd", "combine", "topk-opd", "combine-topk", "combine-stop"):
        assert f"'{allowed}'" in msg
    assert "config show" in msg


def test_invalid_int_from_upstream_name() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={"PORT": "abc"})
    msg = str(err.value)
    assert "server.port" in msg
    assert "env PORT" in msg
    assert "int" in msg


def test_invalid_bool_names_key() -> None:
    with pytest.raises(
        ConfigError, match=r"server\.require_api_key.*CLAWRL_SERVER__REQUIRE_API_KEY"
    ):
        load_settings(env={"CLAWRL_SERVER__REQUIRE_API_KEY": "maybe"})


def test_unknown_env_section() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={"CLAWRL_NOPE__X": "1"})
    msg = str(err.value)
    assert "Unknown config section 'nope'" in msg
    assert "env CLAWRL_NOPE__X" in msg
    assert "server" in msg and "train" in msg


def test_unknown_env_key() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env={"CLAWRL_SERVER__NOPE": "1"})
    msg = str(err.value)
    assert "Unknown setting 'server.nope'" in msg
    assert "env CLAWRL_SERVER__NOPE" in msg
    assert "default_max_tokens" in msg


def test_unknown_cli_key() -> None:
    with pytest.raises(ConfigError, match=r"Unknown setting 'server\.nope' \(from flag --nope\)"):
        load_settings(env={}, cli={"server.nope": 1})


def test_config_error_is_a_value_error() -> None:
    assert issubclass(ConfigError, ValueError)


# --- describe -----------------------------------------------------------------------------


def test_every_field_has_a_docstring() -> None:
    for section_name, section_field in Settings.model_fields.items():
        assert section_field.description, f"section {section_name} has no docstring"
        section_cls = section_field.annotation
        assert section_cls is not None
        for key, f in section_cls.model_fields.items():  # type: ignore[union-attr]
            assert f.description and f.description.strip(), f"{section_name}.{key} has no docstring"


def test_describe_rows_cover_every_field_with_docs_and_sources() -> None:
    loaded = load_settings(env={"CLAWRL_SERVER__PORT": "4321"})
    rows = describe(loaded)
    expected_keys = [
        f"{name}.{key}"
        for name, sf in Settings.model_fields.items()
        for key in sf.annotation.model_fields  # type: ignore[union-attr]
    ]
    assert [r[0] for r in rows] == expected_keys
    for dotted, _value, _source, doc in rows:
        assert doc.strip(), f"{dotted} has an empty docstring in describe()"
    by_key = {r[0]: r for r in rows}
    assert by_key["server.port"][1:3] == (4321, "env CLAWRL_SERVER__PORT")
    assert by_key["server.host"][1:3] == ("127.0.0.1", "default")
    assert "loopback" in by_key["server.host"][3]
