"""Errors of backup, verify and restore. Each is a clear refusal or failure with its exit code.

::

    EvdbError
    └── BackupError                 exit 1
        ├── InvalidBackupFolder     exit 2: a folder name no file system accepts (also InvalidInput: 400)
        ├── ScavengeRunning         exit 3: a scavenge runs on the source (use --stop-scavenge; HTTP 409)
        ├── ScavengeDuringBackup    exit 3: a scavenge (or chunk switch) happened while copying
        ├── MixedSources            exit 4: files of another node (spec rule 3)
        ├── BackupIncomplete        exit 5: the backup has no completion marker
        └── NodeRunning             exit 6: a node holds the database folder (restore)
"""

from __future__ import annotations

from evdb.errors import EvdbError, InvalidInput, JobConflict

__all__ = [
    "BackupError",
    "BackupIncomplete",
    "InvalidBackupFolder",
    "MixedSources",
    "NodeRunning",
    "ScavengeDuringBackup",
    "ScavengeRunning",
]


class BackupError(EvdbError):
    exit_code = 1


class InvalidBackupFolder(BackupError, InvalidInput):
    exit_code = 2


class ScavengeRunning(BackupError, JobConflict):
    exit_code = 3


class ScavengeDuringBackup(BackupError):
    exit_code = 3


class MixedSources(BackupError):
    exit_code = 4


class BackupIncomplete(BackupError):
    exit_code = 5


class NodeRunning(BackupError):
    exit_code = 6
