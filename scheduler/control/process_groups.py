"""Process groups on this machine: how a node agent knows what still runs, and stops it.

An execution is two process groups: the RQ work horse's (RQ makes each horse lead a group
of its own) and its command's (started in a session of its own, so that whatever the
command forks is stopped with it, and the horse can stop the command without stopping
itself). A group is named by its leader's identity, a :class:`ProcessId`: the pid (the
group's id), the process's start time (clock ticks after boot, from /proc) and the boot's
id. Linux does not give a group's id to a new process while any member of the group
lives, and the leader's start time tells a pid given out again apart from the old one, so
a group that is gone is never mistaken for one that runs, and nothing else is signalled.
(Without /proc, identities carry no start time and only the ids are checked.)
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from functools import cache

PROC = "/proc"


@dataclass(frozen=True, slots=True)
class ProcessId:
    """One process, told apart from any later one given the same pid."""

    pid: int
    start: int = 0  # its start time in clock ticks after boot; 0 when unknown
    boot: str = ""  # the boot it started in; "" when unknown


@cache
def boot_id() -> str:
    try:
        with open(f"{PROC}/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state letter, process group, start time) of a process, or None if there is none."""
    try:
        with open(f"{PROC}/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[2]), int(fields[19])


def identify(pid: int) -> ProcessId:
    stat = _stat(pid)
    return ProcessId(pid=pid, start=stat[2] if stat else 0, boot=boot_id())


def running(process: ProcessId) -> bool:
    """The process itself still runs (not a zombie; a paused one counts as running)."""
    if process.boot != boot_id():
        return False
    if not os.path.isdir(PROC):
        return _signal(process.pid, 0, group=False)
    stat = _stat(process.pid)
    return stat is not None and stat[0] not in "ZX" and stat[2] == process.start


def group_running(leader: ProcessId) -> bool:
    """Some member of the group ``leader`` leads still runs (the leader, or what it left)."""
    if leader.boot != boot_id():
        return False
    if not os.path.isdir(PROC):
        return _signal(leader.pid, 0)
    stat = _stat(leader.pid)
    if stat is not None and stat[2] != leader.start:
        return False  # the id belongs to a later process: the group it named is empty
    if stat is not None and stat[0] not in "ZX":
        return True
    if not _signal(leader.pid, 0):
        return False
    return any(member for member in _members(leader.pid))  # only zombies left is gone


def _members(pgid: int):
    for entry in os.listdir(PROC):
        if entry.isdigit():
            stat = _stat(int(entry))
            if stat is not None and stat[1] == pgid and stat[0] not in "ZX":
                yield int(entry)


def stop_group(leader: ProcessId) -> bool:
    """SIGKILL every member of the group ``leader`` leads (then SIGCONT, so that a frozen
    one dies at once); True when nothing of it was left to stop. (The kill takes effect
    shortly after: ask again to confirm it.)"""
    if not group_running(leader) or leader.pid in (os.getpgrp(), 0, 1):
        return True  # never our own group: an execution's groups are always others'
    if not _signal(leader.pid, signal.SIGKILL):
        return True
    _signal(leader.pid, signal.SIGCONT)
    return False


def freeze_group(leader: ProcessId) -> None:
    """SIGSTOP every member of the group ``leader`` leads (not our own group)."""
    if leader.pid not in (os.getpgrp(), 0, 1) and group_running(leader):
        _signal(leader.pid, signal.SIGSTOP)


def thaw_group(leader: ProcessId) -> None:
    """SIGCONT every member of the group ``leader`` leads."""
    if leader.pid not in (0, 1) and group_running(leader):
        _signal(leader.pid, signal.SIGCONT)


def stopped(process: ProcessId) -> bool:
    """The process is paused by a signal (SIGSTOP), not running nor traced."""
    if process.boot != boot_id():
        return False
    stat = _stat(process.pid)
    return stat is not None and stat[0] == "T" and stat[2] == process.start


def kill(process: ProcessId) -> bool:
    """SIGKILL one process if it is still the one named; True when it was not running."""
    if not running(process) or process.pid == os.getpid():
        return True
    return not _signal(process.pid, signal.SIGKILL, group=False)


def _signal(pgid: int, sig: int, group: bool = True) -> bool:
    """Send ``sig`` (0: only look); False when there was no such process or group."""
    try:
        (os.killpg if group else os.kill)(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
