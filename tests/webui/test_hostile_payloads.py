"""The web UI shows any stored payload without failing: JSON nested deeper than Python parses (stored
over gRPC, which does not look into data) and NaN (stored by an older version) are shown as text."""

from __future__ import annotations

from evdb.webui.views import describe_payload


def test_a_payload_nested_too_deep_is_shown_as_text():
    deep = b"[" * 2048 + b"]" * 2048  # within the bytes the page shows whole
    assert describe_payload(deep, True) == deep.decode()


def test_nan_is_shown_as_stored():
    assert describe_payload(b'{"x": NaN}', True) == '{"x": NaN}'
    assert describe_payload(b'{"x": 1}', True) == '{\n  "x": 1\n}'
