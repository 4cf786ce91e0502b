"""A follower forwards a client's write to its leader; the leader's refusal comes back as the same error,
so the client gets the answer it would get from the leader (found by tests/adversarial/test_api_fuzz.py:
a soft delete of a stream that does not exist, sent to a follower, answered 500 'The leader refused the
write: Event stream ... was not found.' where the leader answers 404)."""

from __future__ import annotations

import pytest

from evdb.cluster.forwarding import encode_error, raise_error
from evdb.errors import (
    EvdbError,
    EventTooLarge,
    InvalidInput,
    StreamDeleted,
    StreamNotFound,
    WrongExpectedVersion,
    status_of,
)

REFUSALS = [
    StreamNotFound("orders"),
    StreamDeleted("orders"),
    WrongExpectedVersion("orders", 3, 1),
    EventTooLarge("too large"),
    InvalidInput("bad"),
]


@pytest.mark.parametrize("refusal", REFUSALS, ids=lambda e: type(e).__name__)
def test_a_refusal_forwarded_back_is_the_leaders_refusal(refusal: EvdbError) -> None:
    with pytest.raises(EvdbError) as raised:
        raise_error(encode_error(refusal))
    assert type(raised.value) is type(refusal)
    assert str(raised.value) == str(refusal)
    assert status_of(raised.value) == status_of(refusal)
