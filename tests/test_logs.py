"""Per-node logs: JSON lines in files, text on the console, levels, and several nodes in one process."""

from __future__ import annotations

import io
import json
import logging
import os
import re
from datetime import UTC, datetime, timedelta

import pytest

from evdb.logs import (
    VERBOSE,
    close_node_logging,
    configure_node_logging,
    log_files,
    node_log_files,
    read_log_lines,
    set_level,
)


@pytest.fixture
def node_logger(tmp_path):
    """A factory of node loggers that are closed after the test."""
    made: list[logging.Logger] = []

    def make(name: str = "n1", level: str = "Information", **kwargs) -> tuple[logging.Logger, io.StringIO]:
        console = io.StringIO()
        kwargs.setdefault("log_dir", str(tmp_path / "log"))
        logger = configure_node_logging(node_name=name, level=level, stream=console, **kwargs)
        made.append(logger)
        return logger, console

    yield make
    for logger in made:
        close_node_logging(logger)


def lines_of(logger: logging.Logger) -> list[dict]:
    (path,) = log_files(logger)
    return read_log_lines(path)


def test_lines_reach_the_file_as_json_with_message_level_and_fields(node_logger, tmp_path):
    logger, _ = node_logger("n1")
    logger.info(
        "Scavenge %s with weight %d", "chunk-000001.000000", 42, extra={"fields": {"ScavengeId": "s1"}}
    )
    logger.warning("Disk is %d%% full", 91)
    (path,) = log_files(logger)
    today = datetime.now(UTC).strftime("%Y%m%d")
    assert path == str(tmp_path / "log" / "n1" / f"log-{today}.json")
    with open(path, encoding="utf-8") as f:
        raw = f.read().splitlines()
    assert len(raw) == 2 and all(isinstance(json.loads(line), dict) for line in raw)
    first, second = read_log_lines(path)
    assert first["@m"] == "Scavenge chunk-000001.000000 with weight 42"
    assert first["@l"] == "Information" and first["ScavengeId"] == "s1"
    assert first["SourceContext"] == "evdb.node.n1" and first["ProcessId"] == os.getpid()
    stamp = datetime.fromisoformat(first["@t"].replace("Z", "+00:00"))
    assert first["@t"].endswith("Z") and abs(datetime.now(UTC) - stamp) < timedelta(minutes=1)
    assert (second["@l"], second["@m"]) == ("Warning", "Disk is 91% full")
    assert node_log_files(str(tmp_path / "log"), "n1") == [path]


def test_fields_do_not_overwrite_the_record_keys(node_logger):
    logger, _ = node_logger()
    logger.info("real", extra={"fields": {"@m": "fake", "@l": "Fatal", "Phase": "Accumulation"}})
    (line,) = lines_of(logger)
    assert (line["@m"], line["@l"], line["Phase"]) == ("real", "Information", "Accumulation")


def test_exceptions_are_logged_with_their_traceback(node_logger):
    logger, console = node_logger()
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        logger.exception("Loading certificates failed")
    (line,) = lines_of(logger)
    assert line["@l"] == "Error" and "RuntimeError: boom" in line["@x"]
    assert "RuntimeError: boom" in console.getvalue()


def test_console_lines_are_readable_text(node_logger):
    logger, console = node_logger(log_dir=None)
    logger.info("Node is ready")
    logger.error("Certificate chain is invalid")
    first, second = console.getvalue().splitlines()
    pattern = r"\[ *(\d+), *(\d+),(\d\d:\d\d:\d\d\.\d{3}),(\w{3})\] (.*)"
    match = re.fullmatch(pattern, first)
    assert match and int(match.group(1)) == os.getpid()
    assert (match.group(4), match.group(5)) == ("INF", "Node is ready")
    assert re.fullmatch(pattern, second).group(4, 5) == ("ERR", "Certificate chain is invalid")
    assert log_files(logger) == []  # no folder, no file


def test_json_console_format(node_logger):
    logger, console = node_logger(log_dir=None, console_format="Json")
    logger.info("hello", extra={"fields": {"x": 1}})
    line = json.loads(console.getvalue())
    assert (line["@m"], line["@l"], line["x"]) == ("hello", "Information", 1)


def test_level_filtering(node_logger):
    logger, console = node_logger(level="Warning")
    logger.log(VERBOSE, "verbose")
    logger.debug("debug")
    logger.info("info")
    logger.warning("warning")
    logger.critical("fatal")
    assert [(line["@l"], line["@m"]) for line in lines_of(logger)] == [
        ("Warning", "warning"),
        ("Fatal", "fatal"),
    ]
    assert "info" not in console.getvalue() and "FTL] fatal" in console.getvalue()


def test_level_changes_at_run_time(node_logger):
    logger, _ = node_logger(level="Information")
    logger.debug("hidden")
    set_level(logger, "Verbose")
    logger.log(VERBOSE, "shown")
    set_level(logger, "error")  # names are matched without regard to case
    logger.warning("hidden again")
    logger.error("shown again")
    assert [(line["@l"], line["@m"]) for line in lines_of(logger)] == [
        ("Verbose", "shown"),
        ("Error", "shown again"),
    ]
    with pytest.raises(ValueError, match="Verbose, Debug, Information"):
        set_level(logger, "Loud")


def test_two_nodes_in_one_process_do_not_mix_lines(node_logger, tmp_path):
    a, console_a = node_logger("a", level="Information")
    b, console_b = node_logger("b", level="Debug")
    a.info("from a")
    b.info("from b")
    b.debug("debug from b")
    a.debug("debug from a")  # below a's level
    a.getChild("scavenge").info("child of a")  # components log through children of the node's logger
    assert [line["@m"] for line in lines_of(a)] == ["from a", "child of a"]
    assert [line["@m"] for line in lines_of(b)] == ["from b", "debug from b"]
    assert "from b" not in console_a.getvalue() and "from a" not in console_b.getvalue()
    assert lines_of(a)[1]["SourceContext"] == "evdb.node.a.scavenge"
    assert log_files(a)[0].startswith(str(tmp_path / "log" / "a"))


def test_node_loggers_do_not_touch_the_root_logger(node_logger):
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    logger, _ = node_logger()
    assert logger.name == "evdb.node.n1" and logger.propagate is False
    assert (list(root.handlers), root.level) == before


def test_configuring_a_node_again_replaces_its_handlers(node_logger):
    logger, first_console = node_logger("n1")
    again, second_console = node_logger("n1")
    assert again is logger and len(logger.handlers) == 2  # console + file
    logger.info("once")
    assert first_console.getvalue() == "" and "once" in second_console.getvalue()
    assert [line["@m"] for line in lines_of(logger)] == ["once"]


def test_close_releases_the_files(node_logger):
    logger, _ = node_logger()
    logger.info("before close")
    (path,) = log_files(logger)
    close_node_logging(logger)
    assert logger.handlers == []
    logger.info("after close")  # no handler: goes nowhere, and does not reach the root logger
    assert [line["@m"] for line in read_log_lines(path)] == ["before close"]


def test_a_torn_last_line_is_skipped_by_the_reader(tmp_path):
    path = tmp_path / "log-20240101.json"
    path.write_text('{"@m": "one"}\n[1, 2]\n{"@m": "two"}\n{"@m": "thr')
    assert [line["@m"] for line in read_log_lines(str(path))] == ["one", "two"]


@pytest.mark.parametrize("name", ["", "../up", "a/b", "a.b", "-x"])
def test_node_names_must_be_safe_folder_and_logger_names(name, tmp_path):
    with pytest.raises(ValueError, match="invalid node name"):
        configure_node_logging(node_name=name, log_dir=str(tmp_path), level="Information")


def test_unknown_level_or_console_format_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown log level"):
        configure_node_logging(node_name="x", log_dir=None, level="Loud")
    with pytest.raises(ValueError, match="Plain or Json"):
        configure_node_logging(node_name="x", log_dir=None, level="Debug", console_format="Xml")


def test_numbers_are_written_as_kurrentdb_s_n0_format():
    """KurrentDB's scavenge lines write weights with ``{physicalWeight:N0}``: whole, grouped by commas."""
    from evdb.logs import n0

    assert [n0(v) for v in (120.0, 0, 2.5, 1234.5, 1e6, -1.5)] == [
        "120",
        "0",
        "3",
        "1,235",
        "1,000,000",
        "-2",
    ]


def test_a_node_on_a_fixed_port_keeps_one_log_folder_across_restarts(tmp_path):
    """LocalCluster's nodes got a new random name at every start, so each restart began a new log
    folder and ``/admin/logs`` lost the earlier runs. A node's default name is KurrentDB's log folder,
    ``<ip>-<port>-cluster-node``; one on a port picked at start (0) still gets a name of its own."""
    import uuid

    from evdb.node import default_node_name
    from evdb.options import load_options

    fixed = load_options(
        ["--http-port", "21130", "--http-ip", "127.0.0.2", "--db", str(tmp_path)], environ={}
    )
    names = {default_node_name(fixed, uuid.uuid4()) for _ in range(2)}
    assert names == {"127.0.0.2-21130-cluster-node"}
    picked = load_options(["--http-port", "0", "--db", str(tmp_path)], environ={})
    assert len({default_node_name(picked, uuid.uuid4()) for _ in range(2)}) == 2
