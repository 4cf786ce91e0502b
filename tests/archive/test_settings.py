"""The archive's options in KurrentDB's shape, checked together before anything starts (a mistake:
`evdb node` exits 2 naming it), the licence rule (ARCHIVE entitlement), and the S3 endpoint and keys
from the standard providers (environment, shared credentials and config files)."""

from __future__ import annotations

import pytest
from archive_helpers import KEYS, REGION

from evdb.archive.credentials import s3_access
from evdb.archive.filesystem import FileSystemStore
from evdb.archive.s3 import S3Store
from evdb.archive.settings import archive_settings
from evdb.cli import main
from evdb.errors import InvalidOption
from evdb.licensing import LicenseMissing, LicenseMissingEntitlement
from evdb.licensing.issuers import issue_demo_license
from evdb.logs import node_log_files, read_log_lines
from evdb.node import Node
from evdb.options import load_options

KURRENTDB_SHAPE = """\
Archive:
  Enabled: true
  RetainAtLeast:
    Days: 30
    LogicalBytes: 500000000
  StorageType: S3
  S3:
    Region: eu-west-1
    Bucket: kurrentdb-cluster-123-archive
ReadOnlyReplica: true
Archiver: true
"""


def _options(tmp_path, *argv, config: str | None = None, environ: dict | None = None):
    args = ["--db", str(tmp_path / "db"), "--log", str(tmp_path / "log"), "--insecure"]
    args += ["--http-port", "0", "--stats-period-sec", "0", *argv]
    if config is not None:
        (tmp_path / "node.yaml").write_text(config)
        args += ["--config", str(tmp_path / "node.yaml")]
    return load_options(args, environ or {})


def test_kurrentdbs_yaml_is_read_as_written(tmp_path):
    settings = archive_settings(_options(tmp_path, config=KURRENTDB_SHAPE))
    assert settings.enabled and settings.archiver
    assert (settings.storage_type, settings.s3_region, settings.s3_bucket) == (
        "S3",
        "eu-west-1",
        "kurrentdb-cluster-123-archive",
    )
    assert (settings.retain_days, settings.retain_logical_bytes) == (30, 500_000_000)
    assert settings.location == "s3://kurrentdb-cluster-123-archive (eu-west-1)"


def test_the_environment_and_command_line_spell_it_too(tmp_path):
    environ = {
        "SERVICE_ARCHIVE__ENABLED": "true",
        "SERVICE_ARCHIVE__STORAGE_TYPE": "filesystem",
        "SERVICE_ARCHIVE__FILE_SYSTEM__PATH": str(tmp_path / "archive"),
        "SERVICE_ARCHIVE__RETAIN_AT_LEAST__DAYS": "7",
    }
    options = _options(tmp_path, "--archive-retain-at-least-logical-bytes", "1GiB", environ=environ)
    settings = archive_settings(options)
    assert settings.storage_type == "FileSystem" and settings.folder == str(tmp_path / "archive")
    assert (settings.retain_days, settings.retain_logical_bytes) == (7, 1024**3)
    assert isinstance(settings.open_store(), FileSystemStore)


def test_off_by_default_and_nothing_else_needed(tmp_path):
    assert not archive_settings(_options(tmp_path)).enabled


@pytest.mark.parametrize(
    ("config", "problems"),
    [
        (
            "Archive: {Enabled: true}\n",
            ["StorageType is required", "Days is required", "LogicalBytes is required"],
        ),
        (
            "Archive: {Enabled: true, StorageType: S3, RetainAtLeast: {Days: 1, LogicalBytes: 1}}\n",
            ["S3: Bucket is required", "S3: Region is required"],
        ),
        (
            "Archive: {Enabled: true, StorageType: S3, S3: {Region: x, Bucket: Bad_Bucket}, "
            "RetainAtLeast: {Days: 1, LogicalBytes: 1}}\n",
            ["'Bad_Bucket' is not an S3 bucket name"],
        ),
        (
            "Archive: {Enabled: true, StorageType: FileSystem, RetainAtLeast: {Days: 1, LogicalBytes: 1}}\n",
            ["FileSystem: Path is required"],
        ),
        ("Archiver: true\n", ["needs the archive on", "needs ReadOnlyReplica: true"]),
        (KURRENTDB_SHAPE.replace("ReadOnlyReplica: true\n", ""), ["needs ReadOnlyReplica: true"]),
    ],
)
def test_every_mistake_is_named_at_once(tmp_path, config, problems):
    with pytest.raises(InvalidOption) as raised:
        archive_settings(_options(tmp_path, config=config))
    for problem in problems:
        assert problem in str(raised.value)
    if len(problems) > 1:
        assert str(raised.value).startswith(f"{len(problems)} problems with the archive options")


def test_an_archiver_in_memory_is_refused(tmp_path):
    with pytest.raises(InvalidOption, match="needs a database on disk"):
        archive_settings(_options(tmp_path, "--mem-db", config=KURRENTDB_SHAPE))


def test_a_storage_type_outside_the_choices_is_refused(tmp_path):
    with pytest.raises(
        InvalidOption, match=r"ArchiveStorageType .*'GCP' is not allowed. Accepted: one of S3, FileSystem"
    ):
        _options(tmp_path, config="Archive: {StorageType: GCP}\n")


def test_evdb_node_exits_2_on_a_bad_archive_configuration_before_starting(tmp_path, capsys):
    (tmp_path / "node.yaml").write_text("Archive: {Enabled: true, StorageType: S3}\nArchiver: true\n")
    code = main(
        [
            "node",
            "--config",
            str(tmp_path / "node.yaml"),
            "--db",
            str(tmp_path / "db"),
            "--log",
            str(tmp_path / "log"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "5 problems with the archive options" in err and "S3: Bucket is required" in err
    assert not (tmp_path / "db").exists()  # nothing started


FS_ARCHIVE = "Archive: {{Enabled: true, StorageType: FileSystem, FileSystem: {{Path: {path}}}, RetainAtLeast: {{Days: 1, LogicalBytes: 1000}}}}\n"


async def test_a_node_with_the_archive_on_needs_the_licence(tmp_path, clock):
    config = FS_ARCHIVE.format(path=tmp_path / "archive")
    with pytest.raises(LicenseMissing, match="needs a valid licence with the ARCHIVE entitlement"):
        async with Node(_options(tmp_path, config=config), clock=clock, name="unlicensed"):
            pass
    key = issue_demo_license(clock.time(), entitlements=("REDACTION",))
    options = _options(tmp_path, "--dev", "--license-key", key, config=config)
    with pytest.raises(LicenseMissingEntitlement, match="ARCHIVE"):
        async with Node(options, clock=clock, name="not-entitled"):
            pass


async def test_a_licensed_node_starts_and_says_where_its_archive_is(tmp_path, clock):
    config = FS_ARCHIVE.format(path=tmp_path / "archive")
    options = _options(tmp_path, "--dev", "--license-key", issue_demo_license(clock.time()), config=config)
    async with Node(options, clock=clock, name="licensed") as node:
        assert node.archive_settings.enabled
        logged = [
            line["@m"]
            for path in node_log_files(node.options.log, node.name)
            for line in read_log_lines(path)
        ]
    assert f"Archive on: {tmp_path / 'archive'} (FileSystem), retaining at least 1 days" in "\n".join(logged)


# -- the S3 endpoint and keys ------------------------------------------------------------------------


def test_keys_and_endpoint_come_from_the_environment_first(tmp_path):
    (tmp_path / "credentials").write_text("[default]\naws_access_key_id = file\naws_secret_access_key = f\n")
    access = s3_access(
        {
            **KEYS,
            "AWS_SESSION_TOKEN": "tok",
            "AWS_ENDPOINT_URL": "http://a:1",
            "AWS_ENDPOINT_URL_S3": "http://s3:2",
            "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
        }
    )
    assert (access.endpoint, access.access_key_id, access.session_token) == (
        "http://s3:2",
        "evdb-test",
        "tok",
    )
    assert "environment" in access.source


def test_a_profile_of_the_shared_files_gives_keys_and_endpoint(tmp_path):
    (tmp_path / "credentials").write_text(
        "[default]\naws_access_key_id = d\naws_secret_access_key = d\n\n"
        "[archive]\naws_access_key_id = AKIAARCHIVE\naws_secret_access_key = secret\n"
    )
    (tmp_path / "config").write_text(
        "[profile archive]\nregion = eu-west-1\nendpoint_url = http://minio:9000\n"
    )
    environ = {
        "AWS_PROFILE": "archive",
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials"),
        "AWS_CONFIG_FILE": str(tmp_path / "config"),
    }
    access = s3_access(environ)
    assert (access.endpoint, access.access_key_id, access.secret_access_key) == (
        "http://minio:9000",
        "AKIAARCHIVE",
        "secret",
    )
    assert access.source == f"profile archive of {tmp_path / 'credentials'}"
    # keys in the config file's profile section count too; the default profile's section is [default]
    (tmp_path / "home" / ".aws").mkdir(parents=True)
    (tmp_path / "home" / ".aws" / "config").write_text(
        "[default]\naws_access_key_id = c\naws_secret_access_key = cs\n"
    )
    assert s3_access({"HOME": str(tmp_path / "home")}).access_key_id == "c"


def test_a_named_profile_without_keys_is_refused(tmp_path):
    with pytest.raises(InvalidOption, match="AWS_PROFILE names the profile nowhere"):
        s3_access({"AWS_PROFILE": "nowhere", "HOME": str(tmp_path)})


def test_an_s3_store_reaches_the_bucket_with_a_profiles_keys(tmp_path, s3_endpoint, make_bucket):
    (tmp_path / ".aws").mkdir()
    (tmp_path / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = evdb-test\naws_secret_access_key = evdb-test-secret\n"
    )
    (tmp_path / ".aws" / "config").write_text(f"[default]\nendpoint_url = {s3_endpoint}\n")
    store = S3Store(make_bucket(), REGION, {"HOME": str(tmp_path)})
    store.check()
    store.put_bytes("checkpoint", b"0")
    assert store.get_bytes("checkpoint") == b"0"
    assert store.description.endswith(f"at {s3_endpoint}")
