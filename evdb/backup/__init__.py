"""Backup and restore: the spec's simple full and differential procedures, verify, restore."""

from __future__ import annotations

from evdb.backup.errors import (
    BackupError,
    BackupIncomplete,
    MixedSources,
    NodeRunning,
    ScavengeDuringBackup,
    ScavengeRunning,
)
from evdb.backup.procedures import BackupResult, run_backup
from evdb.backup.progress import Progress, json_lines_listener
from evdb.backup.restore import RestoreResult, restore_backup
from evdb.backup.scavenge_guard import FolderScavengeGuard, HttpScavengeGuard, NodeScavengeGuard
from evdb.backup.verify import VerifyReport, verify_backup

__all__ = [
    "BackupError",
    "BackupIncomplete",
    "BackupResult",
    "FolderScavengeGuard",
    "HttpScavengeGuard",
    "MixedSources",
    "NodeRunning",
    "NodeScavengeGuard",
    "Progress",
    "RestoreResult",
    "ScavengeDuringBackup",
    "ScavengeRunning",
    "VerifyReport",
    "json_lines_listener",
    "restore_backup",
    "run_backup",
    "verify_backup",
]
