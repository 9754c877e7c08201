"""A network-namespace lab: N "nodes" on this machine, joined by a switch, for real multi-node jobs.

Promise: ``with Lab(["node-a", "node-b"]) as lab:`` builds, and always removes again (``close`` in
``__exit__``, ``atexit`` and on SIGTERM; stale labs of dead processes are swept at start):

* a *switch*: network namespace ``<prefix>-sw`` holding bridge ``br0``;
* per node: network namespace ``<prefix>-<name>`` with ``lo`` and ``eth0`` (one end of a veth pair
  whose other end, ``p-<name>``, is a port of the bridge), address ``10.77.0.<i+1>/24``, and a node
  *init* process in new PID + UTS + mount namespaces (hostname ``<name>``, ``/proc`` of its own PID
  namespace, ``/sys`` of its network namespace with the host's cgroup cpu hierarchies mounted again under
  ``/sys/fs/cgroup``, as a real node reads its quota). Commands run "on" a node (``node.popen``) enter all
  its namespaces: they see only the node's processes, its hostname and its interfaces. The file
  system is shared, as a cluster's shared storage is.

Faults, each undone when its context ends (or the lab closes):

* ``lab.flap(node, down_s)``: the node's ``eth0`` down for ``down_s`` seconds, then up (the other
  nodes' links stay up: only the switch port sees the carrier go);
* ``lab.rate_limit(node, mbit)``: a ``tc tbf`` qdisc holding the node's egress to ``mbit`` Mbit/s;
* ``lab.loopback_rate(node, mbit)``: a ``tc tbf`` rate on the node's loopback (its ranks' traffic among
  themselves) only;
* ``lab.cpu_quota(node, share, pids)``: the processes ``pids`` (host pids; their threads and
  children follow) in a cgroup with a CFS quota of ``share`` of one core (cgroup v1
  ``cpu.cfs_quota_us``, or v2 ``cpu.max``);
* ``lab.kill(node)``: the node dies: SIGKILL to its init, so the kernel kills every process of it.

``lab.torchrun(...)`` starts one torchrun launcher per node forming one job over the lab (gloo over
``eth0``, rendezvous at the first node), optionally under ``perftracker run``;
``node.attach(...)`` starts ``perftracker attach`` on a node. ``Lab.available()`` says whether this
machine can build a lab (root, ``ip``, ``unshare``, ``nsenter``) and, if not, why.
Run ``python scripts/netlab.py --help`` (or ``scripts/lab.sh``) for a demonstration job.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parent.parent
JOB_SCRIPT = REPO / "scripts" / "sample_job.py"
SUBNET = "10.77.0"
IFACE = "eth0"
PREFIX = "ptlab"
NETNS_ETC = Path("/etc/netns")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup/unified")

_INIT = r"""
import os, signal, socket, subprocess, sys, time
socket.sethostname(sys.argv[1])
def _mount(*args):
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0
# the node's /sys is its network namespace's sysfs, without the cgroup mounts: mount the cpu ones again, as a
# real node has them (the same hierarchies as the host's: a quota set on the host is read on the node)
if _mount("-t", "tmpfs", "-o", "mode=755", "cgroup", "/sys/fs/cgroup"):
    for name, opts in (("cpu", "cpu"), ("cpu,cpuacct", "cpu,cpuacct"), ("cpuacct", "cpuacct")):
        os.makedirs("/sys/fs/cgroup/" + name, exist_ok=True)
        if not _mount("-t", "cgroup", "-o", opts, "cgroup", "/sys/fs/cgroup/" + name):
            os.rmdir("/sys/fs/cgroup/" + name)
    os.makedirs("/sys/fs/cgroup/unified", exist_ok=True)
    _mount("-t", "cgroup2", "none", "/sys/fs/cgroup/unified")
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("ready", flush=True)
while True:  # PID 1 of the node: reap orphans (torchrun's workers outlive it when it is killed)
    try:
        os.waitpid(-1, 0)
    except ChildProcessError:
        time.sleep(0.2)
"""


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


class LabError(RuntimeError):
    """The lab could not be built or a command in it failed; the message says which and why."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip()}")
    return proc


def _netns_list() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _kill_netns_pids(ns: str) -> None:
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.kill(int(pid), signal.SIGKILL)


def _stale(name: str, prefix: str) -> bool:
    parts = name.split("-")
    return len(parts) >= 3 and parts[0] == prefix and parts[1].isdigit() and not psutil.pid_exists(int(parts[1]))


def sweep_stale(prefix: str = PREFIX) -> list[str]:
    """Remove the namespaces, /etc/netns files and cgroups of labs whose owner process is gone
    (``<prefix>-<pid>-...``: killed before it could clean up)."""
    removed = []
    for root in (CGROUP_V1_CPU, CGROUP_V2, Path("/sys/fs/cgroup")):
        with contextlib.suppress(OSError):
            for group in root.glob(f"{prefix}-*"):
                if group.is_dir() and _stale(group.name, prefix):
                    _remove_cgroup(group)
                    removed.append(str(group))
    for ns in _netns_list():
        if not _stale(ns, prefix):
            continue
        _kill_netns_pids(ns)
        _ip("netns", "del", ns, check=False)
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        removed.append(ns)
    return removed


@dataclass
class Node:
    """One node of the lab: its name (the hostname inside), network namespace, address and init."""

    name: str
    netns: str
    address: str
    init: subprocess.Popen[str] | None = None
    init_pid: int = -1  # host pid of the node's PID 1
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def enter(self, command: Sequence[str]) -> list[str]:
        """`command` run inside every namespace of this node (from the repository root)."""
        if self.init_pid <= 0:
            raise LabError(f"node {self.name} is not running")
        return ["nsenter", "-t", str(self.init_pid), "-n", "-p", "-u", "-m", f"--wd={REPO}", "--", *command]

    def popen(self, command: Sequence[str], env: Mapping[str, str] | None = None, log: Path | None = None,
              ) -> subprocess.Popen[bytes]:
        """Start `command` on this node in the background (output to `log`, else discarded)."""
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
        out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            proc = subprocess.Popen(self.enter(command), env=dict(env or os.environ), stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            if log is not None:
                out.close()  # type: ignore[union-attr]
        self.procs.append(proc)
        return proc

    def run(self, command: Sequence[str], timeout: float = 30.0) -> str:
        """Run `command` on this node and return its output; LabError when it fails."""
        proc = subprocess.run(self.enter(command), capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise LabError(f"on {self.name}: `{' '.join(command)}` exited {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        return proc.stdout

    def pids(self) -> list[int]:
        """Host pids of every process of this node (its PID namespace)."""
        try:
            mine = os.readlink(f"/proc/{self.init_pid}/ns/pid")
        except OSError:
            return []
        found = []
        for proc in psutil.process_iter():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{proc.pid}/ns/pid") == mine:
                    found.append(proc.pid)
        return found

    def workers(self) -> dict[int, int]:
        """rank -> host pid of the job's workers running on this node (RANK in their environment)."""
        found = {}
        for pid in self.pids():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                rank = proc.environ().get("RANK")
                if rank is not None and rank.isdigit() and any(JOB_SCRIPT.name in a for a in proc.cmdline()):
                    found[int(rank)] = pid
        return found

    def job_pids(self) -> list[int]:
        """Host pids of the job's processes on this node: its torchrun launcher and workers."""
        found = []
        for pid in self.pids():
            with contextlib.suppress(psutil.Error):
                argv = psutil.Process(pid).cmdline()
                ours = argv[1:3] == ["-m", "perftracker"]  # `perftracker run -- torchrun ...` names the job too
                if not ours and any(JOB_SCRIPT.name in a for a in argv):
                    found.append(pid)
        return found

    def wait_workers(self, count: int, timeout: float = 90.0) -> dict[int, int]:
        """rank -> host pid once `count` workers run on this node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.workers()
            if len(found) >= count:
                return found
            time.sleep(0.2)
        raise LabError(f"node {self.name}: {count} workers were not up within {timeout:.0f}s")

    def attach(self, run_dir: Path, *extra: str, duration: float = 0.0, log: Path | None = None,
               python: str = sys.executable) -> subprocess.Popen[bytes]:
        """`perftracker attach cmd:sample_job.py` on this node into the shared `run_dir`."""
        cmd = [python, "-m", "perftracker", "attach", f"cmd:{JOB_SCRIPT.name}", "-o", str(run_dir),
               "--duration", f"{duration:g}", "--quiet", *extra]
        return self.popen(cmd, env=_python_env(), log=log)


def _python_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"})
    env.update(extra or {})
    return env


class Lab:
    """Nodes in namespaces joined by a bridge; see the module docstring. Use it as a context manager."""

    def __init__(self, names: Sequence[str] = ("node-a", "node-b"), prefix: str = PREFIX) -> None:
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"node names must be distinct and at least one: {list(names)}")
        self.tag = f"{prefix}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
        self.switch = f"{self.tag}-sw"
        self.nodes = [Node(name, f"{self.tag}-{name}", f"{SUBNET}.{i + 1}") for i, name in enumerate(names)]
        self._cgroups: list[Path] = []
        self._qdiscs: set[str] = set()
        self._closed = True
        self._lock = threading.Lock()
        self._old_term: Any = None

    # --- building and removing --------------------------------------------------------------
    @staticmethod
    def available() -> str:
        """'' when this machine can build a lab, else why not (for a test's skip reason)."""
        if os.geteuid() != 0:
            return "the namespace lab needs root (network, PID and UTS namespaces, veth, tc)"
        missing = [tool for tool in ("ip", "unshare", "nsenter", "tc") if shutil.which(tool) is None]
        if missing:
            return f"the namespace lab needs {', '.join(missing)} (iproute2, util-linux)"
        probe = f"{PREFIX}-probe-{os.getpid()}"
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"cannot create a network namespace here: {made.stderr.strip()}"
        try:
            veth = _ip("-n", probe, "link", "add", "a0", "type", "veth", "peer", "name", "b0", check=False)
            if veth.returncode != 0:
                return f"cannot create veth pairs here: {veth.stderr.strip()}"
            pid = subprocess.run(["unshare", "--pid", "--uts", "--mount", "--fork", "--mount-proc", "true"],
                                 capture_output=True, text=True, check=False)
            if pid.returncode != 0:
                return f"cannot create PID/UTS/mount namespaces here: {pid.stderr.strip()}"
        finally:
            _ip("netns", "del", probe, check=False)
        return ""

    def __enter__(self) -> Lab:
        sweep_stale()
        self._closed = False
        atexit.register(self.close)
        if threading.current_thread() is threading.main_thread():  # SIGTERM unwinds the `with`, like Ctrl-C
            self._old_term = signal.signal(signal.SIGTERM, _exit_on_signal)
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _build(self) -> None:
        hosts = "127.0.0.1 localhost\n" + "".join(f"{n.address} {n.name}\n" for n in self.nodes)
        for node in self.nodes:  # `ip netns exec` mounts these over /etc/hosts and /etc/resolv.conf
            folder = NETNS_ETC / node.netns
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(hosts)
            (folder / "resolv.conf").write_text("# no DNS inside the lab: names come from /etc/hosts\n")
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        _ip("-n", self.switch, "link", "set", "lo", "up")
        for node in self.nodes:
            _ip("netns", "add", node.netns)
            port = f"p-{node.name}"[:15]
            _ip("-n", self.switch, "link", "add", port, "type", "veth", "peer", "name", IFACE, "netns", node.netns)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", node.netns, "addr", "add", f"{node.address}/24", "dev", IFACE)
            _ip("-n", node.netns, "link", "set", IFACE, "up")
            _ip("-n", node.netns, "link", "set", "lo", "up")
            self._start_init(node)

    def _start_init(self, node: Node) -> None:
        node.init = subprocess.Popen(
            ["ip", "netns", "exec", node.netns, "unshare", "--pid", "--uts", "--mount", "--fork", "--mount-proc",
             sys.executable, "-c", _INIT, node.name],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
            start_new_session=True)
        assert node.init.stdout is not None
        line = node.init.stdout.readline()
        if "ready" not in line:
            raise LabError(f"node {node.name}: its init did not start: {line.strip()}")
        children = psutil.Process(node.init.pid).children()
        if not children:
            raise LabError(f"node {node.name}: no init process under unshare {node.init.pid}")
        node.init_pid = children[0].pid

    def close(self) -> None:
        """Remove everything the lab made: processes, cgroups, namespaces. Safe to call twice."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for cgroup in self._cgroups:
            _remove_cgroup(cgroup)
        for node in self.nodes:
            self.kill(node)
            for proc in node.procs:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        for ns in [n.netns for n in self.nodes] + [self.switch]:
            _kill_netns_pids(ns)
            _ip("netns", "del", ns, check=False)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
        with contextlib.suppress(Exception):
            atexit.unregister(self.close)
        if self._old_term is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_term)
            self._old_term = None

    # --- looking up -------------------------------------------------------------------------
    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in this lab ({', '.join(n.name for n in self.nodes)})")

    # --- faults -----------------------------------------------------------------------------
    def link(self, node: Node, up: bool) -> None:
        _ip("-n", node.netns, "link", "set", IFACE, "up" if up else "down")

    def flap(self, node: Node, down_s: float) -> dict[str, int]:
        """Take the node's eth0 down for `down_s` s (blocking). The kernel changed its state at some moment
        during each `ip link set` call: {"down_ns", "up_ns"} are the calls' midpoints (epoch ns), and
        "down_call_ns" / "up_call_ns" how long each call took (a loaded machine can take half a second)."""
        before = time.time_ns()
        self.link(node, up=False)
        after = time.time_ns()
        try:
            time.sleep(down_s)
        finally:
            up_before = time.time_ns()
            self.link(node, up=True)
            up_after = time.time_ns()
        return {"down_ns": (before + after) // 2, "down_call_ns": after - before,
                "up_ns": (up_before + up_after) // 2, "up_call_ns": up_after - up_before}

    @contextlib.contextmanager
    def rate_limit(self, node: Node, mbit: float, burst_kbit: int = 64, latency_ms: int = 100) -> Iterator[None]:
        """The node's egress on eth0 held to `mbit` Mbit/s by a tbf qdisc while the context lasts."""
        subprocess.run(["tc", "-n", node.netns, "qdisc", "replace", "dev", IFACE, "root", "tbf", "rate",
                        f"{mbit:g}mbit", "burst", f"{burst_kbit}kbit", "latency", f"{latency_ms}ms"],
                       check=True, capture_output=True)
        self._qdiscs.add(node.netns)
        try:
            yield
        finally:
            subprocess.run(["tc", "-n", node.netns, "qdisc", "del", "dev", IFACE, "root"], check=False,
                           capture_output=True)
            self._qdiscs.discard(node.netns)

    @contextlib.contextmanager
    def loopback_rate(self, node: Node, mbit: float) -> Iterator[None]:
        """The node's traffic with itself (its loopback: between its own ranks) held to `mbit` Mbit/s by a tbf
        qdisc while the context lasts (its burst above the loopback's 64 KiB MTU); its traffic with other nodes
        is untouched."""
        subprocess.run(["tc", "-n", node.netns, "qdisc", "replace", "dev", "lo", "root", "tbf", "rate",
                        f"{mbit:g}mbit", "burst", "128kb", "latency", "100ms"], check=True, capture_output=True)
        try:
            yield
        finally:
            subprocess.run(["tc", "-n", node.netns, "qdisc", "del", "dev", "lo", "root"], check=False,
                           capture_output=True)

    @contextlib.contextmanager
    def cpu_quota(self, node: Node, share: float, pids: Sequence[int] = ()) -> Iterator[Path]:
        """`pids` (default: every process of the node but its init) held to `share` of one core."""
        group = _make_cgroup(f"{self.tag}-{node.name}", share)
        self._cgroups.append(group)
        stop = threading.Event()

        def keep_moving() -> None:  # processes started later (torchrun's workers) join too
            while not stop.is_set():
                for pid in pids or [p for p in node.pids() if p != node.init_pid]:
                    _join_cgroup(group, pid)
                stop.wait(0.2)

        mover = threading.Thread(target=keep_moving, name="lab-cpu-quota", daemon=True)
        mover.start()
        try:
            yield group
        finally:
            stop.set()
            mover.join(5)
            _remove_cgroup(group)
            with contextlib.suppress(ValueError):
                self._cgroups.remove(group)

    def kill(self, node: Node) -> None:
        """The node dies: its init (PID 1 of its namespace) is killed, and with it every process of it."""
        if node.init_pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.init_pid, signal.SIGKILL)
        if node.init is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.init.wait(timeout=10)
            if node.init.stdout is not None:
                node.init.stdout.close()
        node.init_pid = -1

    # --- jobs -------------------------------------------------------------------------------
    def torchrun(self, run_dir: Path, nproc_per_node: int, job_args: Sequence[str], *, port: int = 29400,
                 under_run: bool = False, logs: Path | None = None, python: str = sys.executable,
                 env: Mapping[str, str] | None = None, nodes: Sequence[Node] | None = None,
                 ) -> list[subprocess.Popen[bytes]]:
        """One torchrun launcher per node (of `nodes`, default all), one job: ranks node by node, gloo over
        eth0, rendezvous at the first node. `under_run` starts each as `perftracker run -o run_dir -- torchrun
        ...` (without its step hook: the sample job writes its own step files)."""
        members = list(nodes or self.nodes)
        launchers = []
        for i, node in enumerate(members):
            cmd = [python, "-m", "torch.distributed.run", "--nnodes", str(len(members)), "--node_rank", str(i),
                   "--nproc_per_node", str(nproc_per_node), "--max_restarts", "0",
                   "--master_addr", members[0].address, "--master_port", str(port),
                   str(JOB_SCRIPT), "--run-dir", str(run_dir), *job_args]
            if under_run:
                cmd = [python, "-m", "perftracker", "run", "-o", str(run_dir), "--no-hook", "--no-kineto-daemon",
                       "--", *cmd]
            log = logs / f"{node.name}.log" if logs is not None else None
            launchers.append(node.popen(cmd, env=_python_env({"GLOO_SOCKET_IFNAME": IFACE, **(env or {})}), log=log))
        return launchers


def _make_cgroup(name: str, share: float, period_us: int = 100_000) -> Path:
    quota = max(1000, int(share * period_us))
    if (CGROUP_V1_CPU / "cpu.cfs_quota_us").is_file():
        group = CGROUP_V1_CPU / name
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(str(quota))
        return group
    for root in (CGROUP_V2, Path("/sys/fs/cgroup")):
        if (root / "cgroup.controllers").is_file() and "cpu" in (root / "cgroup.controllers").read_text().split():
            with contextlib.suppress(OSError):
                (root / "cgroup.subtree_control").write_text("+cpu")
            group = root / name
            group.mkdir(exist_ok=True)
            (group / "cpu.max").write_text(f"{quota} {period_us}")
            return group
    raise LabError("no writable cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max)")


def _join_cgroup(group: Path, pid: int) -> None:
    with contextlib.suppress(OSError):
        (group / "cgroup.procs").write_text(str(pid))


def _remove_cgroup(group: Path) -> None:
    if not group.is_dir():
        return
    parent = group.parent / "cgroup.procs"
    with contextlib.suppress(OSError):
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                parent.write_text(pid)
    for _ in range(50):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.05)


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout: float) -> list[int | None]:
    """Exit codes of `procs` (None for one still running after `timeout` s in all)."""
    deadline = time.monotonic() + timeout
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(0.1, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def wait_launchers(procs: Sequence[subprocess.Popen[bytes]], timeout: float, grace: float = 30.0,
                   ) -> list[int | None]:
    """Exit codes of one job's launchers, as `wait_all`, except that once one launcher fails the others get
    `grace` s more, not the rest of `timeout`: torchrun's exit barrier would hold them for 300 s waiting for
    the failed node's agent, which never comes."""
    deadline = time.monotonic() + timeout
    while None in (codes := [p.poll() for p in procs]) and time.monotonic() < deadline:
        if any(code not in (None, 0) for code in codes):
            deadline = min(deadline, time.monotonic() + grace)
        time.sleep(0.2)
    return codes


def wait_steps(run_dir: Path, ranks: Sequence[int], steps: int, timeout: float = 60.0) -> None:
    """Wait until every rank of `ranks` wrote `steps` step lines."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [(run_dir / "steps" / f"rank-{r}.jsonl") for r in ranks]
        if all(p.is_file() and len(p.read_text().splitlines()) >= steps for p in done):
            return
        time.sleep(0.1)
    raise TimeoutError(f"ranks {list(ranks)} did not reach {steps} steps within {timeout:.0f}s")


@dataclass(frozen=True)
class Scenario:
    """One lab job: nodes x ranks, how perftracker collects (attach or run on every node), one fault."""

    nodes: int = 3
    nproc: int = 2  # ranks per node
    collect: str = "attach"  # attach | run
    fault: str = "none"  # none | flap | rate | cpu | kill
    fault_node: str = "node-b"
    fault_step: int = 8  # the fault begins once rank 0 has done this many steps (rate: from the start)
    down_s: float = 3.0  # flap
    mbit: float = 20.0  # rate
    share: float = 0.2  # cpu: of one core, for the node's whole job (launcher and workers)
    steps: int = 30
    profile_steps: int = 12
    profile_skip: int = -1  # -1: the last steps
    width: int = 256
    batch: int = 32
    step_sleep: float = 0.05
    timeout_s: float = 240.0
    # attach --watch on every node (the online rules; incidents in RUN/incidents/). The job is then hooked and
    # writes its own files into RUN-job/, so that its step times reach each watcher through the hook
    watch: bool = False
    incident_seconds: float = 2.0  # with watch: each incident's side-by-side stack recording

    def job_args(self) -> list[str]:
        return ["--steps", str(self.steps), "--profile-steps", str(self.profile_steps), "--profile-skip",
                str(self.profile_skip), "--width", str(self.width), "--batch", str(self.batch), "--step-sleep",
                str(self.step_sleep), "--pg-timeout", "60", *(["--hook"] if self.watch else [])]


def node_names(count: int) -> list[str]:
    return [f"node-{chr(ord('a') + i)}" for i in range(count)]


def run_scenario(lab: Lab, sc: Scenario, run_dir: Path, port: int = 29400) -> dict[str, Any]:
    """Run `sc` on the first `sc.nodes` nodes of `lab` into `run_dir`; what was done (the truth), with the
    launchers' and attaches' exit codes and the fault's times (epoch ns)."""
    nodes = lab.nodes[:sc.nodes]
    logs = run_dir / "lab-logs"
    job_dir = run_dir.with_name(run_dir.name + "-job") if sc.watch else run_dir
    launchers = lab.torchrun(job_dir, sc.nproc, sc.job_args(), under_run=sc.collect == "run", nodes=nodes,
                             logs=logs, port=port)
    truth: dict[str, Any] = {"nodes": [{"name": n.name, "address": n.address} for n in nodes], "ranks_per_node":
                             sc.nproc, "collect": sc.collect, "fault": {"kind": sc.fault}}
    attaches: list[subprocess.Popen[bytes]] = []
    try:
        for node in nodes:
            node.wait_workers(sc.nproc, timeout=sc.timeout_s / 2)
        if sc.collect == "attach":
            watching = ["--watch", "--incident-seconds", f"{sc.incident_seconds:g}"] if sc.watch else []
            attaches = [n.attach(run_dir, "--no-stacks", "--profile-seconds", "0", "--no-analyze", *watching,
                                 log=logs / f"attach-{n.name}.log") for n in nodes]
        faulty = lab.node(sc.fault_node) if sc.fault != "none" else None
        fault = truth["fault"]
        if faulty is not None:
            fault.update(node=faulty.name, iface=IFACE)
        limit: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if faulty is not None and sc.fault == "rate":
            limit = lab.rate_limit(faulty, sc.mbit)
            fault.update(mbit=sc.mbit, from_ns=time.time_ns())
        with limit:
            if faulty is not None and sc.fault in ("flap", "cpu", "kill"):
                wait_steps(run_dir, [0], sc.fault_step, timeout=sc.timeout_s)
            if faulty is not None and sc.fault == "flap":
                fault.update(lab.flap(faulty, sc.down_s))
            elif faulty is not None and sc.fault == "kill":
                fault.update(killed_ns=time.time_ns())
                lab.kill(faulty)
            quota: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
            if faulty is not None and sc.fault == "cpu":
                quota = lab.cpu_quota(faulty, sc.share, pids=faulty.job_pids())
                fault.update(share=sc.share, from_ns=time.time_ns())
            with quota:
                # (a killed node's survivors fail on their own, through the process group's timeout: wait for it)
                grace = sc.timeout_s if sc.fault == "kill" else 30.0
                truth["launchers_exit"] = wait_launchers(launchers, timeout=sc.timeout_s, grace=grace)
            if sc.fault in ("rate", "cpu"):
                fault["until_ns"] = time.time_ns()
        truth["attaches_exit"] = wait_all(attaches, timeout=60)
    finally:
        for proc in [*launchers, *attaches]:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
    return truth


def _demo(args: argparse.Namespace) -> int:
    why = Lab.available()
    if why:
        print(f"netlab: {why}", file=sys.stderr)
        return 2
    run_dir = Path(args.out).resolve()
    if run_dir.exists() and any(run_dir.iterdir()):
        print(f"netlab: {run_dir} is not empty; choose a new directory", file=sys.stderr)
        return 2
    run_dir.mkdir(parents=True, exist_ok=True)
    sc = Scenario(nodes=args.nodes, nproc=args.nproc, collect=args.collect, fault=args.fault,
                  fault_node=args.fault_node, down_s=args.down_s, mbit=args.mbit, share=args.share, steps=args.steps,
                  profile_steps=args.steps - 2, width=args.width, timeout_s=args.timeout)
    with Lab(node_names(args.nodes)) as lab:
        print(f"netlab: {args.nodes} nodes ({', '.join(f'{n.name} {n.address}' for n in lab.nodes)}) on a bridge; "
              f"{args.nproc} rank(s) each; perftracker {args.collect} on every node; fault: {args.fault}")
        truth = run_scenario(lab, sc, run_dir)
    print(f"netlab: done: {json.dumps(truth)}")
    print(f"netlab: lab removed; run directory {run_dir}")
    cmd = [sys.executable, "-m", "perftracker", "analyze", str(run_dir), "-o", str(run_dir / "perftracker-out")]
    print("netlab: " + " ".join(cmd))
    return subprocess.run(cmd, env=_python_env(), check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the sample job over a network-namespace lab, with perftracker "
                                     "attached (or `perftracker run`) on every node, inject one fault, analyze.")
    parser.add_argument("--out", required=True, help="run directory to create")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=2, help="ranks per node")
    parser.add_argument("--collect", choices=["attach", "run"], default="attach")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--fault", choices=["none", "flap", "rate", "cpu", "kill"], default="none")
    parser.add_argument("--fault-node", default="node-b")
    parser.add_argument("--down-s", type=float, default=3.0, help="flap: seconds the link stays down")
    parser.add_argument("--mbit", type=float, default=20.0, help="rate: egress limit in Mbit/s")
    parser.add_argument("--share", type=float, default=0.2, help="cpu: CPU quota as a share of one core")
    parser.add_argument("--timeout", type=float, default=300.0)
    args = parser.parse_args(argv)
    return _demo(args)


if __name__ == "__main__":
    sys.exit(main())
