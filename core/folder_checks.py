"""Whether a file system can hold a run folder, asked before the folder is made.

`check_run_folder` refuses a path with a name longer than its file system allows
(ENAMETOOLONG), a path longer than the system's limit, and a folder on a kernel file system
(``/proc``, ``/sys``: `KERNEL_FILE_SYSTEMS`) that holds no files, where "no such file" or "not
permitted" would mislead; `scarce_ltr.core.runs.Run.of` calls it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from scarce_ltr.core.errors import UserError

# Kernel file systems that hold no files of a user's (their mount types in /proc/self/mounts).
KERNEL_FILE_SYSTEMS = {
    "proc": "the kernel's view of its processes",
    "sysfs": "the kernel's view of its devices and drivers",
    "devtmpfs": "the device nodes",
    "devpts": "the terminals",
    "cgroup": "the control groups",
    "cgroup2": "the control groups",
    "debugfs": "the kernel's debug files",
    "tracefs": "the kernel's trace files",
    "securityfs": "the security modules' files",
    "configfs": "the kernel's configuration objects",
    "bpf": "the BPF objects",
    "pstore": "the kernel's crash records",
    "efivarfs": "the firmware's variables",
    "mqueue": "the message queues",
}


def check_run_folder(folder: Path) -> None:
    """`UserError` for a run folder no file system could hold: a name longer than the file
    system allows (ENAMETOOLONG, said before a folder is made), or a folder on a kernel file
    system (``/proc``, ``/sys``), where "no such file" or "not permitted" would mislead."""
    path = Path(os.path.abspath(folder))
    existing = next((p for p in (path, *path.parents) if _exists(p)), Path("/"))
    name_max = _path_limit(existing, "PC_NAME_MAX", 255)
    for part in path.parts:
        size = len(os.fsencode(part))
        if size > name_max:
            short = part if len(part) <= 40 else f"{part[:20]}...{part[-12:]}"
            raise UserError(
                f"the run folder's path holds a name of {size} bytes ({short!r}); this file "
                f"system allows {name_max} bytes per name: give run_dir=<a shorter path>"
            )
    path_max = _path_limit(existing, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(path))) >= path_max:
        raise UserError(
            f"run folder {str(path)[:40]}...: a path of {len(os.fsencode(str(path)))} bytes; this "
            f"file system allows {path_max - 1}: give run_dir=<a shorter path>"
        )
    mount, kind = _mount_of(existing.resolve())
    if kind in KERNEL_FILE_SYSTEMS:
        raise UserError(
            f"run folder {folder}: {mount} is the {kind} file system ({KERNEL_FILE_SYSTEMS[kind]}"
            "), which holds no files of yours: give run_dir=<a folder on a disk>"
        )


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name too long to look up (ENAMETOOLONG): not there
        return False


def _path_limit(folder: Path, name: str, default: int) -> int:
    try:
        return os.pathconf(folder, name)
    except (OSError, ValueError):  # no such limit here (another system): the usual one
        return default


def _mount_of(path: Path) -> tuple[str, str | None]:
    """The mount point holding ``path`` and its file system type (Linux's /proc/self/mounts);
    ``("", None)`` where there is no mount table to read."""
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return "", None
    best, kind = "", None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # Spaces and tabs in mount points are written as octal escapes (\040).
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        inside = point == "/" or path == Path(point) or Path(point) in path.parents
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return best, kind
