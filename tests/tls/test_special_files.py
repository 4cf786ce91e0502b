"""Certificate, key and trusted-root paths that are not regular files (a FIFO, /dev/zero) or are too
large: the loader refuses them at once, naming the file, at start and on reload (issue 20, item 6).

Before the fix a FIFO blocked the reader forever and /dev/zero was read until memory ran out; every
call here is bounded, and a FIFO is always opened for writing afterwards so a blocked reader ends.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from evdb.tls import CertificateError, create_ca, create_node_certificate, load_node_tls, loading

BOUND = 10.0  # seconds: a refusal is immediate; a hang would last forever


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    base = tmp_path_factory.mktemp("pki")
    ca_cert, ca_key = create_ca(base / "ca")
    cert, key = create_node_certificate(ca_cert, ca_key, base / "node", ip_addresses=["127.0.0.1"])
    return {"cert": cert, "key": key, "ca": ca_cert.parent}


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "fifo.pem"
    os.mkfifo(path)
    yield path
    release_fifo(path)


def release_fifo(path: Path) -> None:
    """End a read blocked on ``path`` (if any): open it for writing, then close it (EOF)."""
    with contextlib.suppress(OSError):
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def bounded_load(paths: dict[str, Path], fifo: Path | None = None) -> BaseException | None:
    """load_node_tls in a thread, waited for at most BOUND seconds; the error it raised."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            load_node_tls(paths["cert"], paths["key"], paths["ca"])
            outcome.append(None)
        except BaseException as exc:  # handed to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND)
    if thread.is_alive():
        if fifo is not None:
            release_fifo(fifo)
        pytest.fail(f"loading {paths} did not answer within {BOUND:.0f} s")
    return outcome[0]


@pytest.mark.parametrize("which", ["cert", "key", "ca"])
def test_a_fifo_is_refused_at_once_naming_it(pki, fifo, which):
    paths = {**pki, which: fifo}
    error = bounded_load(paths, fifo)
    assert isinstance(error, CertificateError), error
    assert str(fifo) in str(error) and "not a regular file" in str(error) and "FIFO" in str(error)
    assert error.path == str(fifo)


@pytest.mark.parametrize("which", ["cert", "key", "ca"])
def test_a_device_is_refused_at_once_naming_it(pki, which):
    paths = {**pki, which: Path("/dev/zero")}
    error = bounded_load(paths)
    assert isinstance(error, CertificateError), error
    assert "/dev/zero" in str(error) and "not a regular file" in str(error) and "device" in str(error)


def test_a_symlink_to_a_fifo_is_refused(pki, fifo, tmp_path):
    link = tmp_path / "node.key"
    link.symlink_to(fifo)
    error = bounded_load({**pki, "key": link}, fifo)
    assert isinstance(error, CertificateError) and str(link) in str(error) and "FIFO" in str(error)


def test_a_file_over_the_size_limit_is_refused(pki, tmp_path):
    big = tmp_path / "big.crt"
    with open(big, "wb") as f:
        f.truncate(loading.MAX_FILE_SIZE + 1)  # sparse: nothing is written
    error = bounded_load({**pki, "cert": big})
    assert isinstance(error, CertificateError)
    assert str(big) in str(error) and "larger than" in str(error)


def test_a_fifo_in_a_trusted_root_folder_is_skipped(pki, tmp_path):
    """Only regular files of a trusted-root folder are read: a FIFO there neither hangs nor counts."""
    folder = tmp_path / "roots"
    folder.mkdir()
    (folder / "ca.crt").write_bytes((pki["ca"] / "ca.crt").read_bytes())
    os.mkfifo(folder / "other.pem")
    try:
        assert bounded_load({**pki, "ca": folder}, folder / "other.pem") is None
    finally:
        release_fifo(folder / "other.pem")


# -- start: the node refuses to start, naming the file, with exit code 1 ------------------------------
def _limit_memory() -> None:  # the child may never eat the machine's memory (before the fix it did)
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_node_with_a_special_certificate_file_does_not_start(pki, tmp_path, fifo, special):
    path = fifo if special == "fifo" else Path(special)
    config = tmp_path / "node.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "Db": str(tmp_path / "db"),
                "Log": str(tmp_path / "log"),
                "HttpIp": "127.0.0.1",
                "HttpPort": 0,
                "StatsPeriodSec": 0,
                "CertificateFile": str(path),
                "CertificatePrivateKeyFile": str(pki["key"]),
                "TrustedRootCertificatesPath": str(pki["ca"]),
            }
        )
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "evdb.cli", "node", "--config", str(config)],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=_limit_memory,
            cwd=tmp_path,
        )
    finally:
        release_fifo(fifo)
    assert done.returncode == 1, done.stderr
    assert f"evdb node: cannot start: {path}:" in done.stderr and "not a regular file" in done.stderr
