"""The option table, its three forms, precedence, validation, reload and the generated docs."""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import re
from pathlib import Path

import pytest

from evdb.errors import InvalidOption
from evdb.options import (
    OPTIONS,
    Options,
    add_arguments,
    deprecation_warnings,
    effective_configuration,
    load_options,
    options_from_namespace,
    reload_options,
    render_markdown,
)
from evdb.options.markdown import main as markdown_main
from evdb.options.sources import IGNORED_ENVIRONMENT
from evdb.options.spec import GROUPS, OptionSpec

#: every option read here as a node reads it (not with the suite's cheaper hash cost: tests/conftest.py)
pytestmark = pytest.mark.usefixtures("production_environment")

DOCS = Path(__file__).parent.parent / "docs" / "options.md"
MiB = 1024**2


def write(tmp_path: Path, text: str, name: str = "node.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def errors_of(argv=(), env=None, yaml_text=None, tmp_path=None) -> str:
    argv = list(argv)
    if yaml_text is not None:
        argv += ["--config", write(tmp_path, yaml_text)]
    with pytest.raises(InvalidOption) as info:
        load_options(argv, env or {})
    return str(info.value)


# -- the table and its documentation -------------------------------------------------------------------
def test_docs_are_generated_from_the_table():
    assert DOCS.read_text() == render_markdown(), (
        "docs/options.md is stale: run python -m evdb.options --markdown > docs/options.md"
    )


def test_markdown_entry_point_prints_the_docs(capsys):
    assert markdown_main(["--markdown"]) == 0
    assert capsys.readouterr().out == render_markdown()
    assert markdown_main([]) == 2


def test_every_option_is_documented_with_its_three_names_and_a_meaning():
    docs = DOCS.read_text()
    for o in OPTIONS:
        assert o.meaning.strip().endswith("."), o.name
        assert f"`{o.yaml_key}`" in docs and f"`{o.flag}`" in docs and f"`{o.env}`" in docs, o.name


def test_every_option_is_in_help_with_its_three_names_type_default_and_flags():
    parser = argparse.ArgumentParser(
        prog="evdb node", formatter_class=lambda prog: argparse.HelpFormatter(prog, width=100_000)
    )
    add_arguments(parser)
    text = " ".join(parser.format_help().split())
    for o in OPTIONS:
        assert o.flag in text and o.yaml_key in text and o.env in text, o.name
        assert " ".join(o.meaning.split()) in text, o.name
        assert f"default {o.default_text}" in text, o.name
    assert text.count("(reloadable)") == sum(o.reloadable for o in OPTIONS) > 0
    assert text.count("(deprecated:") == sum(bool(o.deprecated) for o in OPTIONS) > 0
    for group in {o.group for o in OPTIONS}:
        assert f"{group}:" in text


def test_names_follow_the_spec_forms():
    by_name = {o.name: o for o in OPTIONS}
    spec_table = {  # the spec's "Server options for scavenging" and UnsafeIgnoreHardDelete
        "DisableScavengeMerging": ("--disable-scavenge-merging", "SERVICE_DISABLE_SCAVENGE_MERGING"),
        "ScavengeHistoryMaxAge": ("--scavenge-history-max-age", "SERVICE_SCAVENGE_HISTORY_MAX_AGE"),
        "AlwaysKeepScavenged": ("--always-keep-scavenged", "SERVICE_ALWAYS_KEEP_SCAVENGED"),
        "ScavengeBackendPageSize": ("--scavenge-backend-page-size", "SERVICE_SCAVENGE_BACKEND_PAGE_SIZE"),
        "ScavengeBackendCacheSize": ("--scavenge-backend-cache-size", "SERVICE_SCAVENGE_BACKEND_CACHE_SIZE"),
        "ScavengeHashUsersCacheCapacity": (
            "--scavenge-hash-users-cache-capacity",
            "SERVICE_SCAVENGE_HASH_USERS_CACHE_CAPACITY",
        ),
        "UnsafeIgnoreHardDelete": ("--unsafe-ignore-hard-delete", "SERVICE_UNSAFE_IGNORE_HARD_DELETE"),
        "AutoScavengeEnabled": ("--auto-scavenge-enabled", "SERVICE_AUTO_SCAVENGE_ENABLED"),
        "MemDb": ("--mem-db", "SERVICE_MEM_DB"),
        "CertificateReservedNodeCommonName": (
            "--certificate-reserved-node-common-name",
            "SERVICE_CERTIFICATE_RESERVED_NODE_COMMON_NAME",
        ),
    }
    for name, (flag, env) in spec_table.items():
        assert (by_name[name].flag, by_name[name].env) == (flag, env)
    assert by_name["AutoScavengeEnabled"].yaml_key == "AutoScavenge: Enabled"
    assert by_name["MemDb"].attr == "mem_db"


def test_the_table_is_consistent():
    names = [o.name for o in OPTIONS]
    for spelling in ("name", "flag", "env", "attr"):
        values = [getattr(o, spelling) for o in OPTIONS]
        assert len(set(values)) == len(values), spelling
    for o in OPTIONS:
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]*", o.name), o.name
        assert o.group in GROUPS
        if not o.optional:  # the default is a value the option accepts
            assert o.parse(o.default, "default") == o.default, o.name
        assert not IGNORED_ENVIRONMENT.match(o.env), o.name  # the Kubernetes allow-list hides no option
        assert all(alias not in names for alias in o.aliases)
    assert {f.name for f in dataclasses.fields(Options)} == {o.attr for o in OPTIONS} | {
        "config_sources",
        "environment_warnings",
    }


def test_an_option_spec_refuses_an_unknown_type_or_group():
    with pytest.raises(ValueError, match="type"):
        OptionSpec("X", "colour", None, "x.", "Application")
    with pytest.raises(ValueError, match="group"):
        OptionSpec("X", "int", 1, "x.", "Nowhere")


def test_float_and_ip_types_for_future_options():
    ratio = OptionSpec("Ratio", "float", 0.5, "A ratio.", "Application", minimum=0, maximum=1)
    assert ratio.parse("0.25", "test") == 0.25 and ratio.parse(1, "test") == 1.0
    for bad, message in (("nan", "finite"), ("half", "not a number"), ("2", "out of range")):
        with pytest.raises(
            InvalidOption, match=rf"Ratio \(test\): .*{message}.*Accepted: a number from 0 to 1"
        ):
            ratio.parse(bad, "test")
    address = OptionSpec("Bind", "ip", "0.0.0.0", "An address.", "Interface")
    assert address.parse(" 0:0::1 ", "test") == "::1"


# -- defaults and value syntax ------------------------------------------------------------------------
def test_defaults_follow_the_spec():
    o = load_options([], {})
    assert o.disable_scavenge_merging is False
    assert o.scavenge_history_max_age == 30
    assert o.always_keep_scavenged is False
    assert o.scavenge_backend_page_size == 16384  # bytes, as KurrentDB
    assert o.scavenge_backend_cache_size == 64 * MiB
    assert o.scavenge_hash_users_cache_capacity == 100_000
    assert o.unsafe_ignore_hard_delete is False
    assert o.auto_scavenge_enabled is None  # follow the licence
    assert o.chunk_size == 256 * MiB and o.max_append_size == 16 * MiB and o.max_mem_table_size == 1_000_000
    assert (o.http_ip, o.http_port, o.insecure) == ("127.0.0.1", 2113, False)
    assert (o.db, o.index, o.log) == ("./data/db", "./data/db/index", "./data/log")
    assert (o.log_level, o.log_console_format) == ("Information", "Plain")
    assert o.certificate_reserved_node_common_name == "eventstoredb-node"
    assert o.stats_period_sec == 30 and o.license_key == "" and o.config is None
    assert set(o.config_sources.values()) == {"default"}


def test_index_defaults_to_a_folder_inside_db(tmp_path):
    o = load_options(["--db", str(tmp_path / "data" / "db")], {})
    assert o.index == str(tmp_path / "data" / "db" / "index")
    assert o.config_sources["Index"] == "default"
    explicit = load_options(["--db", "/a/db", "--index", "/b/idx"], {})
    assert explicit.index == "/b/idx"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("yes", True),
        ("1", True),
        ("on", True),
        ("false", False),
        ("No", False),
        ("0", False),
        ("off", False),
    ],
)
def test_booleans_in_env_and_command_line(text, expected):
    assert load_options([f"--mem-db={text}"], {}).mem_db is expected
    assert load_options(["--mem-db", text], {}).mem_db is expected
    assert load_options([], {"SERVICE_MEM_DB": text}).mem_db is expected


def test_a_boolean_flag_alone_means_true():
    o = load_options(["--mem-db", "--insecure", "--http-port", "0"], {})
    assert o.mem_db is True and o.insecure is True and o.http_port == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("65536", 65536),
        ("64KiB", 65536),
        ("64 kib", 65536),
        ("1MiB", MiB),
        ("1GiB", 1024**3),
        ("100KB", 100_000),
        ("1 MB", 1_000_000),
    ],
)
def test_sizes_accept_integers_and_suffixes(text, expected):
    assert load_options(["--chunk-size", text], {}).chunk_size == expected


def test_yaml_values_keep_their_types(tmp_path):
    config = write(
        tmp_path,
        "MemDb: yes\nHttpPort: 2114\nChunkSize: 1MiB\nLicenseKey: 12345\nloglevel: warning\nIndex:\n",
    )
    o = load_options(["--config", config], {})
    assert (o.mem_db, o.http_port, o.chunk_size, o.license_key) == (True, 2114, MiB, "12345")
    assert o.log_level == "Warning"  # case-insensitive keys and enum values, canonical spelling
    assert o.index == "./data/db/index" and o.config_sources["Index"] == "default"  # "Index:" = not given


def test_nested_yaml_keys_and_kurrentdb_spellings(tmp_path):
    config = write(tmp_path, "AutoScavenge:\n  Enabled: false\nLicensing:\n  LicenseKey: abc\n")
    o = load_options(["--config", config], {})
    assert o.auto_scavenge_enabled is False and o.license_key == "abc"
    assert o.config_sources["AutoScavengeEnabled"] == "yaml"
    flat = load_options(["--config", write(tmp_path, "AutoScavengeEnabled: true\n", "flat.yaml")], {})
    assert flat.auto_scavenge_enabled is True
    env = load_options([], {"SERVICE_AUTO_SCAVENGE__ENABLED": "no", "SERVICE_LICENSING__LICENSE_KEY": "k"})
    assert env.auto_scavenge_enabled is False and env.license_key == "k"
    assert load_options(["--auto-scavenge-enabled"], {}).auto_scavenge_enabled is True
    assert load_options([], {"SERVICE_AUTO_SCAVENGE_ENABLED": ""}).auto_scavenge_enabled is None


def test_config_file_can_be_named_in_the_environment(tmp_path):
    config = write(tmp_path, "HttpPort: 3000\n")
    o = load_options([], {"SERVICE_CONFIG": config})
    assert o.http_port == 3000 and o.config == config and o.config_sources["Config"] == "env"


def test_kubernetes_service_links_are_ignored():
    env = {
        "SERVICE_SERVICE_HOST": "10.0.0.1",
        "SERVICE_SERVICE_PORT": "2113",
        "SERVICE_SERVICE_PORT_HTTP": "2113",
        "SERVICE_PORT": "tcp://10.0.0.1:2113",
        "SERVICE_PORT_2113_TCP": "tcp://10.0.0.1:2113",
        "SERVICE_PORT_2113_TCP_PROTO": "tcp",
        "SERVICE_PORT_2113_TCP_PORT": "2113",
        "SERVICE_PORT_2113_TCP_ADDR": "10.0.0.1",
        "PATH": "/usr/bin",
    }
    assert load_options([], env).http_port == 2113
    with pytest.raises(InvalidOption, match="SERVICE_PORT"):  # a plain port is a mistake, not a link
        load_options([], {"SERVICE_PORT": "2113"})


# -- precedence and sources ---------------------------------------------------------------------------
def test_precedence_command_line_over_env_over_yaml_over_default(tmp_path):
    config = write(tmp_path, "HttpPort: 1111\nStatsPeriodSec: 5\nScavengeHistoryMaxAge: 7\n")
    env = {"SERVICE_HTTP_PORT": "2222", "SERVICE_STATS_PERIOD_SEC": "6"}
    o = load_options(["--config", config, "--http-port", "3333"], env)
    assert (o.http_port, o.stats_period_sec, o.scavenge_history_max_age, o.chunk_size) == (
        3333,
        6,
        7,
        256 * MiB,
    )
    assert o.config_sources["HttpPort"] == "command line"
    assert o.config_sources["StatsPeriodSec"] == "env"
    assert o.config_sources["ScavengeHistoryMaxAge"] == "yaml"
    assert o.config_sources["ChunkSize"] == "default"
    assert o.source_of("Config") == "command line"


def test_options_from_a_namespace_parsed_by_a_sub_command(tmp_path):
    parser = argparse.ArgumentParser(prog="evdb")
    node = parser.add_subparsers(dest="command").add_parser("node")
    add_arguments(node)
    ns = parser.parse_args(["node", "--mem-db", "--log-level", "Debug"])
    o = options_from_namespace(ns, {"SERVICE_HTTP_PORT": "0"})
    assert o.mem_db is True and o.log_level == "Debug" and o.http_port == 0
    assert o.config_sources["MemDb"] == "command line" and o.config_sources["HttpPort"] == "env"
    assert o.config_sources["Db"] == "default"


def test_replace_checks_values_and_records_the_source():
    o = load_options(["--db", "/srv/a/db", "--http-port", "1"], {})
    moved = o.replace(db="/srv/b/db", http_port=0)
    assert (moved.db, moved.index, moved.http_port) == ("/srv/b/db", "/srv/b/db/index", 0)
    assert moved.config_sources["Db"] == "code" and o.db == "/srv/a/db"
    with pytest.raises(InvalidOption, match="HttpPort"):
        o.replace(http_port=70000)
    with pytest.raises(TypeError, match="no_such"):
        o.replace(no_such=1)
    assert pickle.loads(pickle.dumps(moved)) == moved
    built = Options(http_port=0, db="/srv/c/db")  # direct construction: checked too, sources filled in
    assert (built.index, built.config_sources["HttpPort"], built.config_sources["Dev"]) == (
        "/srv/c/db/index",
        "code",
        "default",
    )
    with pytest.raises(InvalidOption, match=r"HttpPort \(set in code\)"):
        Options(http_port=-1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.http_port = 5  # type: ignore[misc]


def test_effective_configuration_masks_the_licence_key_and_deprecations_are_reported():
    o = load_options(["--license-key", "secret-key", "--always-keep-scavenged"], {})
    rows = {name: (value, source) for name, value, source in effective_configuration(o)}
    assert rows["LicenseKey"] == ("****", "command line")
    assert rows["HttpPort"] == ("2113", "default")
    assert "secret-key" not in repr(rows)
    assert deprecation_warnings(o) == [
        "The option AlwaysKeepScavenged is deprecated: "
        "it has no effect: a scavenged chunk always replaces the old one."
    ]
    assert deprecation_warnings(load_options([], {})) == []


# -- validation: every class of error names the option and what it accepts ------------------------------
@pytest.mark.parametrize(
    ("argv", "env", "yaml_text", "expected"),
    [
        # unknown names, in each source, with a suggestion where one is close
        (["--no-such-option", "1"], {}, None, r"Unknown command-line option --no-such-option"),
        (["--chunksize", "1"], {}, None, r"--chunksize.*did you mean --chunk-size\?"),
        (["--mem", "1"], {}, None, r"--mem: .*did you mean --mem-db"),  # no abbreviations
        (["stray"], {}, None, r"Unexpected command-line argument 'stray'"),
        ([], {"SERVICE_HTTP_PROT": "1"}, None, r"SERVICE_HTTP_PROT.*did you mean SERVICE_HTTP_PORT\?"),
        ([], {}, "NoSuchOption: 1\n", r"Unknown option 'NoSuchOption' in .*node\.yaml"),
        ([], {}, "AutoScavenge:\n  Enabld: true\n", r"'AutoScavenge: Enabld'.*AutoScavengeEnabled"),
        # wrong types
        (["--http-port", "abc"], {}, None, r"HttpPort \(command line --http-port\): 'abc' is not an integer"),
        (["--mem-db=maybe"], {}, None, r"MemDb .*'maybe' is not a boolean\. Accepted: true or false"),
        (
            [],
            {"SERVICE_CHUNK_SIZE": "1.5GiB"},
            None,
            r"ChunkSize \(environment variable SERVICE_CHUNK_SIZE\)",
        ),
        ([], {}, "HttpPort: [1, 2]\n", r"HttpPort \(YAML file .*, key HttpPort\): a list"),
        ([], {}, "HttpPort: yes\n", r"HttpPort .*True is not an integer"),
        ([], {}, "HttpIp: localhost\n", r"HttpIp .*not an IPv4 or IPv6 address"),
        (["--http-port"], {}, None, r"HttpPort .*a value is required\. Accepted: an integer from 0 to 65535"),
        ([], {"SERVICE_DB": ""}, None, r"Db .*a value is required"),
        # out of range
        (
            ["--http-port", "99999"],
            {},
            None,
            r"HttpPort .*99999 is out of range\. Accepted: an integer from 0 to 65535",
        ),
        (
            ["--chunk-size", "1KiB"],
            {},
            None,
            r"ChunkSize .*1024 is out of range.*65536 \(64 KiB\) to 1073741824",
        ),
        ([], {"SERVICE_STATS_PERIOD_SEC": "-1"}, None, r"StatsPeriodSec .*out of range"),
        # not one of the allowed values
        (
            ["--log-level", "Loud"],
            {},
            None,
            r"LogLevel .*'Loud' is not allowed\. Accepted: one of Verbose, Debug",
        ),
        ([], {}, "LogConsoleFormat: Fancy\n", r"LogConsoleFormat .*Accepted: one of Plain, Json"),
        (
            ["--scavenge-backend-page-size", "16"],
            {},
            None,
            r"ScavengeBackendPageSize .*one of 1024, 2048, 4096, 8192, 16384, 32768, 65536 \(bytes\)",
        ),
        # the file itself
        ([], {}, "just a string\n", r"must hold a mapping"),
        ([], {}, "HttpPort: [\n", r"not valid YAML"),
        ([], {}, "HttpPort: 1\nHttpPort: 2\n", r"'HttpPort' is written twice"),
        ([], {}, "AutoScavengeEnabled: true\nAutoScavenge:\n  Enabled: false\n", r"given twice"),
        ([], {}, "Config: other.yaml\n", r"Config: the option cannot be set inside"),
    ],
)
def test_bad_options_are_named(tmp_path, argv, env, yaml_text, expected):
    assert re.search(expected, errors_of(argv, env, yaml_text, tmp_path))


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(InvalidOption, match=r"configuration file .*missing\.yaml does not exist"):
        load_options(["--config", str(tmp_path / "missing.yaml")], {})


def test_every_problem_is_reported_at_once(tmp_path):
    message = errors_of(
        ["--http-port", "x", "--bogus"], {"SERVICE_NOPE": "1"}, "Wrong: 1\nChunkSize: 1\n", tmp_path
    )
    assert message.startswith("5 problems with the options:")
    for part in ("--bogus", "SERVICE_NOPE", "'Wrong'", "ChunkSize", "HttpPort"):
        assert part in message


# -- reload ---------------------------------------------------------------------------------------------
def test_reload_applies_reloadable_options(tmp_path):
    config = write(tmp_path, "LogLevel: Information\nCertificateFile: /certs/old.crt\n")
    current = load_options(["--config", config, "--http-port", "0"], {})
    write(
        tmp_path, "LogLevel: Debug\nCertificateFile: /certs/new.crt\nCertificateReservedNodeCommonName: n2\n"
    )
    fresh, changed = reload_options(current, {})
    assert changed == ["CertificateFile", "CertificateReservedNodeCommonName", "LogLevel"]
    assert (fresh.log_level, fresh.certificate_file) == ("Debug", "/certs/new.crt")
    assert fresh.http_port == 0 and fresh.config_sources["HttpPort"] == "command line"  # kept
    assert reload_options(fresh, {}) == (fresh, [])


def test_reload_refuses_options_that_need_a_restart(tmp_path):
    config = write(tmp_path, "LogLevel: Information\n")
    current = load_options(["--config", config], {})
    write(tmp_path, "LogLevel: Debug\nChunkSize: 64KiB\nHttpPort: 1234\n")
    with pytest.raises(
        InvalidOption, match=r"not reloaded: ChunkSize, HttpPort changed, which needs a restart"
    ):
        reload_options(current, {})


def test_reload_refuses_an_invalid_file(tmp_path):
    config = write(tmp_path, "LogLevel: Information\n")
    current = load_options(["--config", config], {})
    write(tmp_path, "LogLevel: Loudest\n")
    with pytest.raises(InvalidOption, match="LogLevel"):
        reload_options(current, {})
    Path(config).unlink()
    with pytest.raises(InvalidOption, match="does not exist"):
        reload_options(current, {})


def test_reload_keeps_values_set_in_code(tmp_path):
    config = write(tmp_path, "HttpPort: 2113\n")
    current = load_options(["--config", config], {}).replace(http_port=0)
    fresh, changed = reload_options(current, {})
    assert fresh.http_port == 0 and changed == []
