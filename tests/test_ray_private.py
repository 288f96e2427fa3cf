"""A Ray started for the work (``executor=ray``, ``search.trial_executor=ray`` with no address)
listens on the loopback only: every listener of it (GCS, raylet, object manager, agents, workers,
the driver itself) is bound to 127.0.0.1 or ::1, whatever other interfaces the machine has.

Checked in a network namespace the test makes (``unshare -n``) with a second interface of its
own (10.200.0.1, and a default route through it, so the machine has an address the network
would reach); no packet leaves the namespace. It skips, with the reason, where ``unshare -n`` or
the interface is not allowed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_ray_sweep import _kill, _netns_refusal, _node_processes

pytest.importorskip("ray", reason='Ray is not installed (pip install "scarce-ltr[cluster]")')

NO_INTERFACE = 3  # the namespace script's exit code when no second interface can be made
# lo up; a second interface (dummy, else a veth pair) at 10.200.0.1 with the default route
# through it: what Ray, asked for this machine's address, would take; then the Python child.
NAMESPACE = """
ip link set lo up || exit 1
ip link add ltr0 type dummy 2>/dev/null || ip link add ltr0 type veth peer name ltr1 \
  || exit {code}
ip addr add 10.200.0.1/24 dev ltr0 && ip link set ltr0 up || exit {code}
ip link set ltr1 up 2>/dev/null
ip route add default dev ltr0 || exit {code}
exec "$0" -c "$1" "$2"
"""

# Inside the namespace: start Ray as a sweep does (`RayExecutor`: connect, then a task on every
# node), list the listeners, stop Ray; prints the listeners as JSON.
CHILD = """
import json, sys
from pathlib import Path
from scarce_ltr.sweeps.ray_executor import RayConfig, RayExecutor
from test_ray_private import listeners
import ray
RayExecutor(RayConfig(), Path(sys.argv[1]), stages={"baseline"})
print("LISTENERS " + json.dumps(listeners()), flush=True)
ray.shutdown()
"""


def _address(hex_address: str) -> str:
    """``/proc/net/tcp``'s hex address (its words in host byte order) as an IP address."""
    import ipaddress
    import socket

    raw = bytes.fromhex(hex_address)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    address = ipaddress.ip_address(socket.inet_ntop(family, words))
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def listeners() -> list[tuple[str, str, int]]:
    """``(protocol, address, port)`` of each TCP socket listening and each UDP socket bound
    (not connected) in this network namespace."""
    found = []
    for proto, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        path = Path("/proc/net") / proto
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == state:
                host, port = fields[1].split(":")
                found.append((proto, _address(host), int(port, 16)))
    return found


def _loopback(address: str) -> bool:
    import ipaddress

    return ipaddress.ip_address(address).is_loopback


def test_a_local_ray_listens_on_the_loopback_only(tmp_path: Path) -> None:
    refusal = _netns_refusal()
    if refusal is not None:
        pytest.skip(f"unshare -n is not allowed here ({refusal}): the test needs a network "
                    "namespace of its own")  # fmt: skip
    root = tempfile.mkdtemp(prefix="ltr-rp-", dir="/tmp")  # Ray's socket paths: keep short
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": root,  # Ray writes ~/.ray/auth_token
        "RAY_TMPDIR": root,
        "PYTHONPATH": str(Path(__file__).parent),
        "OMP_NUM_THREADS": "1",
    }
    script = NAMESPACE.format(code=NO_INTERFACE)
    command = ["unshare", "-n", "sh", "-c", script, sys.executable, CHILD, str(tmp_path)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env,
                              cwd=Path(__file__).parent.parent.parent)  # fmt: skip
    finally:
        _kill(_node_processes(root))
        shutil.rmtree(root, ignore_errors=True)
    if done.returncode == NO_INTERFACE:
        pytest.skip(f"no second interface in the namespace ({done.stderr.strip()[-300:]})")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("LISTENERS "))
    found = [tuple(x) for x in json.loads(line.removeprefix("LISTENERS "))]
    assert len([x for x in found if x[0].startswith("tcp")]) >= 4, found  # GCS, raylet, driver...
    assert [x for x in found if not _loopback(x[1])] == [], found


def test_proc_net_addresses_are_read_right() -> None:
    assert _address("0100007F") == "127.0.0.1"
    assert _address("00000000") == "0.0.0.0"
    assert _address("00000000000000000000000001000000") == "::1"
    assert _address("0000000000000000FFFF00000100007F") == "127.0.0.1"  # ::ffff:127.0.0.1
    assert _address("00000000000000000000000000000000") == "::"
    assert not _loopback("0.0.0.0") and not _loopback("::") and _loopback("::1")
