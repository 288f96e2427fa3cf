"""The processes of this machine as tests that start servers and jobs check them (from /proc):
who runs, under which parent, in which process group."""

from __future__ import annotations

from pathlib import Path


def processes() -> dict[int, tuple[int, int, str]]:
    """PID -> (parent PID, process group, command line) of every process now."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry.name)] = (int(fields[1]), int(fields[2]), cmdline)
    return found
