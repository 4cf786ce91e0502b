import evdb


def test_public_surface_is_pinned():
    assert sorted(evdb.__all__) == sorted(
        [
            "ANY",
            "NO_STREAM",
            "STREAM_EXISTS",
            "AccessDenied",
            "AppendResult",
            "Clock",
            "CorruptedFile",
            "Database",
            "DatabaseClosed",
            "DatabaseConfig",
            "DatabaseLocked",
            "EventRecord",
            "EventTooLarge",
            "EvdbError",
            "InvalidInput",
            "InvalidOption",
            "ManualClock",
            "NewEvent",
            "Node",
            "NotLeader",
            "Options",
            "ScavengeAlreadyRunning",
            "ScavengeError",
            "ScavengeNotFound",
            "StorageError",
            "StreamDeleted",
            "StreamError",
            "StreamMetadata",
            "StreamNotFound",
            "SystemClock",
            "WrongExpectedVersion",
            "load_options",
        ]
    )
    for name in evdb.__all__:
        assert getattr(evdb, name) is not None


def test_every_error_is_an_evdb_error():
    for name in evdb.__all__:
        obj = getattr(evdb, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, evdb.EvdbError), name


def test_every_public_name_resolves_and_the_table_matches_all():
    # the names are imported on first use (evdb/__init__.py's table): each must resolve, and the
    # table must list exactly __all__
    for name in evdb.__all__:
        assert getattr(evdb, name) is not None, name
    assert sorted(evdb._LAZY) == sorted(evdb.__all__)
