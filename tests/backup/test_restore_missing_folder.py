"""A restore from a folder that does not exist says so (issue 34), not "not a finished backup"; the
node's folders are not touched and the CLIs exit 2 (bad input)."""

from __future__ import annotations

import pytest

from evdb.backup.errors import InvalidBackupFolder
from evdb.backup.restore import restore_backup
from evdb.cli import main as evdb_main


def test_a_restore_from_a_missing_folder_names_it(tmp_path, capsys):
    missing, db = tmp_path / "backups" / "node2", tmp_path / "db"
    db.mkdir()
    (db / "chaser.chk").write_bytes(b"x" * 8)
    with pytest.raises(InvalidBackupFolder, match=rf"^There is no folder {missing}: name a folder"):
        restore_backup(str(missing), str(db), overwrite=True)
    assert [p.name for p in db.iterdir()] == ["chaser.chk"] and not missing.exists()
    assert evdb_main(["restore", "--from", str(missing), "--db", str(db), "--overwrite"]) == 2
    assert f"There is no folder {missing}" in capsys.readouterr().err
