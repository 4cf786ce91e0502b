"""One set of scavenge start rules (evdb.scavenge.params) and every surface using it: HTTP (in
tests/node/test_hostile_input.py), gRPC (idem), ``evdb scavenge start`` and the dashboard's dialog."""

from __future__ import annotations

import pytest

from evdb.cli import main
from evdb.scavenge.params import (
    INT32_MAX,
    InvalidScavengeParameter,
    ScavengeRequest,
    parse_scavenge_request,
)
from tui.calls import FormError, ScavengeForm

REFUSED = [
    ({"threads": "0"}, "threads", "threads must be a 1 or above"),
    ({"threads": -3}, "threads", "threads must be a 1 or above"),
    ({"threads": "two"}, "threads", "threads must be a 1 or above"),
    ({"threads": str(2**31)}, "threads", "threads must be at most 2147483647"),
    ({"threshold": "x"}, "threshold", "threshold must be an integer"),
    ({"threshold": "1_000"}, "threshold", "threshold must be an integer"),
    ({"threshold": "٣"}, "threshold", "threshold must be an integer"),
    ({"threshold": 2.5}, "threshold", "threshold must be an integer"),
    ({"threshold": "-2"}, "threshold", "threshold must be -1"),
    ({"threshold": str(10**100)}, "threshold", "threshold must be an integer"),
    ({"threshold": 2**31}, "threshold", "threshold must be an integer"),
    ({"throttle_percent": "0"}, "throttlePercent", "throttlePercent must be between 1 and 100 inclusive"),
    ({"throttle_percent": str(10**30)}, "throttlePercent", "throttlePercent must be between 1 and 100"),
    ({"threads": 2, "throttle_percent": 50}, "throttlePercent", "throttlePercent must be 100 for a multi"),
    ({"sync_only": "maybe"}, "syncOnly", "syncOnly must be a boolean"),
    ({"start_from_chunk": "-1"}, "startFromChunk", "startFromChunk must be a positive integer"),
    ({"start_from_chunk": str(2**70)}, "startFromChunk", "startFromChunk must be at most 2147483647"),
    ({"start_from_chunk": 2**31}, "startFromChunk", "startFromChunk must be at most 2147483647"),
]


@pytest.mark.parametrize(("values", "parameter", "message"), REFUSED)
def test_refused_parameters_name_the_parameter(values, parameter, message):
    with pytest.raises(InvalidScavengeParameter) as raised:
        parse_scavenge_request(**values)
    assert raised.value.parameter == parameter
    assert str(raised.value).startswith(message)


def test_defaults_limits_and_text():
    assert parse_scavenge_request() == ScavengeRequest(1, 0, 100, False)
    assert parse_scavenge_request(
        threads="4", threshold="-1", throttle_percent=" 100 ", sync_only="TRUE", start_from_chunk="0"
    ) == ScavengeRequest(4, -1, 100, True)
    assert parse_scavenge_request(threshold=INT32_MAX, start_from_chunk=INT32_MAX).threshold == INT32_MAX
    assert parse_scavenge_request(threads="", threshold="") == ScavengeRequest()


def test_scavenge_request_validate_uses_the_same_rules():
    with pytest.raises(InvalidScavengeParameter):
        ScavengeRequest(threshold=-2).validate()
    assert ScavengeRequest(2, 5, 100, True).validate() == ScavengeRequest(2, 5, 100, True)


@pytest.mark.parametrize(
    ("form", "field", "message"),
    [
        (ScavengeForm(threshold="-2"), "threshold", "threshold must be -1"),
        (ScavengeForm(threshold=str(10**100)), "threshold", "threshold must be an integer"),
        (ScavengeForm(threads=str(2**40)), "threads", "threads must be at most"),
        (ScavengeForm(threads="2", throttle_percent="50"), "throttle_percent", "throttlePercent must be 100"),
    ],
)
def test_the_dashboard_dialog_applies_the_same_rules(form, field, message):
    with pytest.raises(FormError) as raised:
        form.validate()
    assert raised.value.field_name == field
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    "argv",
    [
        ["--threshold", "-2"],
        ["--threshold", str(2**31)],
        ["--threads", "0"],
        ["--throttle-percent", "0"],
        ["--threads", "2", "--throttle-percent", "50"],
    ],
)
def test_cli_refuses_bad_parameters_with_exit_2_before_any_request(argv, capsys):
    # nothing listens on this address: a request would fail differently (exit 1, connection error)
    code = main(["scavenge", "start", "--node", "http://127.0.0.1:9", *argv])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("evdb scavenge start: ") and "must" in err
