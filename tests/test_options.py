from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from evdb.cli import build_parser
from evdb.errors import InvalidOption
from evdb.options import OPTIONS, add_arguments, load_options, reload_options, render_markdown

DOCS = Path(__file__).parent.parent / "docs" / "options.md"


def test_docs_are_generated_from_the_table():
    assert DOCS.read_text() == render_markdown(), (
        "docs/options.md is stale: run python -m evdb.options --markdown"
    )


def test_every_option_is_in_node_help_with_its_three_names():
    parser = build_parser()
    node = parser._subparsers._group_actions[0].choices["node"]
    text = node.format_help()
    for o in OPTIONS:
        assert o.flag in text, o.name
        assert o.name in text and o.env in text, o.name
        assert (
            o.meaning.split(";")[0][:30] in text.replace("\n", " ").replace("  ", " ")
            or o.meaning[:20] in text
        )


def test_every_option_has_a_meaning_and_a_documented_default():
    docs = DOCS.read_text()
    for o in OPTIONS:
        assert o.meaning.strip(), o.name
        assert f"`{o.name}`" in docs and f"`{o.flag}`" in docs and f"`{o.env}`" in docs


def test_defaults_follow_the_spec():
    o = load_options([], {})
    assert o.disable_scavenge_merging is False
    assert o.scavenge_history_max_age == 30
    assert o.scavenge_backend_page_size == 16
    assert o.scavenge_backend_cache_size == 64 * 1024 * 1024
    assert o.scavenge_hash_users_cache_capacity == 100_000
    assert o.unsafe_ignore_hard_delete is False
    assert o.chunk_size == 256 * 1024 * 1024
    assert o.index == "./data/db/index"


def test_precedence_command_line_env_yaml_default(tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text(
        "HttpPort: 1111\nStatsPeriodSec: 5\nScavengeHistoryMaxAge: 7\nAutoScavenge:\n  Enabled: false\n"
    )
    env = {"SERVICE_HTTP_PORT": "2222", "SERVICE_STATS_PERIOD_SEC": "6"}
    o = load_options(["--config", str(config), "--http-port", "3333"], env)
    assert o.http_port == 3333 and o.stats_period_sec == 6 and o.scavenge_history_max_age == 7
    assert o.auto_scavenge_enabled is False
    assert o.config_sources["HttpPort"] == "command line"
    assert o.config_sources["StatsPeriodSec"] == "environment"
    assert o.config_sources["ScavengeHistoryMaxAge"] == "yaml"


def test_booleans_and_sizes():
    o = load_options(["--mem-db", "--insecure=false", "--chunk-size", "64KiB"], {"SERVICE_DEV": "yes"})
    assert o.mem_db is True and o.insecure is False and o.chunk_size == 65536 and o.dev is True


@pytest.mark.parametrize(
    ("argv", "env", "yaml_text", "message"),
    [
        (["--no-such-option", "1"], {}, None, "unrecognized arguments"),
        ([], {"SERVICE_NO_SUCH": "1"}, None, "SERVICE_NO_SUCH"),
        ([], {}, "NoSuchOption: 1\n", "NoSuchOption"),
        (["--http-port", "99999"], {}, None, "HttpPort"),
        (["--http-port", "abc"], {}, None, "HttpPort"),
        (["--mem-db=maybe"], {}, None, "MemDb"),
        (["--log-level", "Loud"], {}, None, "Verbose, Debug, Information"),
        (["--chunk-size", "1"], {}, None, "ChunkSize"),
        ([], {}, "HttpPort: [1, 2]\n", "HttpPort"),
        ([], {}, "just a string\n", "mapping"),
        ([], {}, "HttpPort: [\n", "not valid YAML"),
    ],
)
def test_bad_options_are_named(tmp_path, argv, env, yaml_text, message):
    if yaml_text is not None:
        config = tmp_path / "bad.yaml"
        config.write_text(yaml_text)
        argv = [*argv, "--config", str(config)]
    with pytest.raises(InvalidOption, match=message):
        load_options(argv, env)


def test_missing_config_file_is_named(tmp_path):
    with pytest.raises(InvalidOption, match="does not exist"):
        load_options(["--config", str(tmp_path / "missing.yaml")], {})


def test_reload_applies_reloadable_options_and_refuses_others(tmp_path):
    config = tmp_path / "node.yaml"
    config.write_text("LogLevel: Information\n")
    current = load_options(["--config", str(config)], {})
    config.write_text("LogLevel: Debug\n")
    fresh, changed = reload_options(current, {})
    assert fresh.log_level == "Debug" and changed == ["LogLevel"]
    config.write_text("LogLevel: Debug\nChunkSize: 65536\n")
    with pytest.raises(InvalidOption, match="ChunkSize"):
        reload_options(fresh, {})


def test_every_option_parses_from_its_flag():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {a.option_strings[0] for a in parser._actions if a.option_strings and a.option_strings[0] != "-h"}
    assert flags == {o.flag for o in OPTIONS}
