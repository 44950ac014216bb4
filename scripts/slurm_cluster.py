"""A throwaway single-node SLURM cluster on loopback, for tests and for trying sweeps.

    python scripts/slurm_cluster.py [--cpus N] [--memory-mb M] -- COMMAND [ARG]...
    python scripts/slurm_cluster.py            # no command: print SLURM_CONF, wait for Ctrl-C
    python scripts/slurm_cluster.py --check    # can one run here? (else: what is missing)

Run as root on a machine with Debian's slurmctld, slurmd, slurmdbd, slurm-client,
slurm-wlm-mysql-plugin, munge and mariadb-server-core. Everything lives in a fresh temp
dir: munged with a new key, MariaDB with slurmdbd (so `sacct` works, as submitit needs),
slurmctld and slurmd, all in the foreground on 127.0.0.1 with free ports and a generated
slurm.conf (N CPUs, one partition, MaxArraySize). COMMAND runs with SLURM_CONF set, so
sbatch, squeue, sacct and scancel talk to this cluster; when it ends (or fails, or on
Ctrl-C) every job is cancelled, every daemon and job process is stopped and the dir removed.
The daemons are started with PR_SET_PDEATHSIG, so they also die if this process is killed.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

# executable -> the Debian package that ships it (what .ci/run installs)
REQUIRED = {
    "munged": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "slurmdbd": "slurmdbd",
    "sbatch": "slurm-client",
    "mariadbd": "mariadb-server-core",
}
MYSQL_PLUGIN = "accounting_storage_mysql.so"
PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm-wlm", "/usr/lib/aarch64-linux-gnu/slurm-wlm")
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 15
PR_SET_PDEATHSIG = 1
MAX_ARRAY_SIZE = 1001  # SLURM's own default: array indices 0..1000


class ClusterError(RuntimeError):
    """The cluster could not be brought up; the message names the daemon and its log."""


def unavailable() -> str | None:
    """Why this machine cannot run a throwaway cluster, or None when it can."""
    if sys.platform != "linux":
        return "a throwaway SLURM cluster needs Linux"
    if os.geteuid() != 0:
        return "a throwaway SLURM cluster runs its daemons as root (not root here)"
    missing = sorted({pkg for exe, pkg in REQUIRED.items() if not _which(exe)})
    if not any(Path(d, MYSQL_PLUGIN).is_file() for d in PLUGIN_DIRS):
        missing.append("slurm-wlm-mysql-plugin")
    if missing:
        return (
            f"missing Debian packages: {' '.join(missing)} (apt-get install -y {' '.join(missing)})"
        )
    return None


def _which(name: str) -> str | None:
    return shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")


def _free_ports(count: int) -> list[int]:
    """Ports the kernel has just handed out, so two clusters on one machine do not clash."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _die_with_parent() -> None:
    """preexec_fn: the daemon gets SIGTERM when the process that started it dies."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Cluster:
    """A running cluster: its dir, slurm.conf, partition, node name and daemons."""

    root: Path
    conf: Path
    partition: str
    node: str
    cpus: int
    memory_mb: int
    daemons: list[tuple[str, subprocess.Popen]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment a client (sbatch, squeue, a sweep) needs to reach this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def command(self, *words: str, check: bool = True, timeout: float = 30) -> str:
        """Run a SLURM client command against this cluster; its stdout."""
        done = subprocess.run(
            list(words), env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise ClusterError(f"{' '.join(words)}: {done.stderr.strip() or done.returncode}")
        return done.stdout

    def log_tails(self, lines: int = 15) -> str:
        """The end of every daemon log, for a test failure message."""
        parts = []
        for path in sorted(self.root.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {path.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def jobs(self) -> list[str]:
        return self.command("squeue", "--noheader", "--format=%i", check=False).split()

    def wait_idle(self, timeout: float) -> bool:
        """True once no job is queued or running (squeue lists nothing)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.jobs():
                return True
            time.sleep(0.5)
        return False


def _write(path: Path, text: str, mode: int = 0o644) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def _slurm_conf(
    cluster: Cluster, ports: dict[str, int], munge_socket: Path, host: str, default: bool
) -> str:
    root = cluster.root
    return f"""# generated by scripts/slurm_cluster.py: a throwaway single-node cluster
ClusterName=sweeptest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
SlurmdPort={ports["slurmd"]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU_Memory
SchedulerType=sched/builtin
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort={ports["slurmdbd"]}
AccountingStoragePass={munge_socket}
JobCompType=jobcomp/none
MpiDefault=none
MaxArraySize={MAX_ARRAY_SIZE}
ReturnToService=2
MinJobAge=600
KillWait=2
OverTimeLimit=0
InactiveLimit=0
PlugStackConfig={root}/plugstack.conf
NodeName={cluster.node} NodeAddr=127.0.0.1 CPUs={cluster.cpus} RealMemory={cluster.memory_mb}
PartitionName={cluster.partition} Nodes={cluster.node} Default={"YES" if default else "NO"} State=UP
"""


def _slurmdbd_conf(root: Path, ports: dict[str, int], munge_socket: Path) -> str:
    return f"""# generated by scripts/slurm_cluster.py
AuthType=auth/munge
AuthInfo=socket={munge_socket}
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort={ports["slurmdbd"]}
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={ports["mysql"]}
StorageUser=root
StorageLoc=slurm_acct_db
PidFile={root}/slurmdbd.pid
LogFile={root}/slurmdbd.log
DebugLevel=info
"""


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start(
    cluster: Cluster, name: str, argv: list[str], ready: Callable[[], bool], what: str
) -> None:
    """Start one daemon in the foreground and wait until ready() says it serves."""
    log = open(cluster.root / f"{name}.out.log", "ab")
    process = subprocess.Popen(
        argv,
        cwd=cluster.root,
        env=cluster.env | {"SLURM_THROWAWAY_CLUSTER": str(cluster.root)},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,
    )
    log.close()
    cluster.daemons.append((name, process))
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if process.poll() is not None:
            raise ClusterError(f"{name} exited ({process.returncode}) before {what}")
        if time.monotonic() > deadline:
            raise ClusterError(f"{name} did not {what} within {START_TIMEOUT_S} s")
        time.sleep(0.2)


def _node_state(cluster: Cluster) -> str:
    return cluster.command("sinfo", "--noheader", "--format=%T", check=False).strip()


def start(
    cpus: int = 2,
    memory_mb: int = 2048,
    partition: str = "sweep",
    default_partition: bool = True,
) -> Cluster:
    """Bring a cluster up; on any failure everything started so far is stopped again."""
    if not PARTITION_NAME.fullmatch(partition):
        raise ClusterError(f"partition name {partition[:80]!r} cannot be written in slurm.conf")
    reason = unavailable()
    if reason:
        raise ClusterError(reason)
    root = Path(tempfile.mkdtemp(prefix="slurm-"))  # short: munge's socket path is limited
    root.chmod(0o755)  # munged insists that its socket's directories are searchable
    host = socket.gethostname().split(".")[0]
    cluster = Cluster(root, root / "slurm.conf", partition, host, cpus, memory_mb)
    try:
        _bring_up(cluster, host, default_partition)
    except BaseException:
        tails = cluster.log_tails()
        stop(cluster)
        raise ClusterError(f"cluster failed to start; daemon logs:\n{tails}") from None
    return cluster


def _bring_up(cluster: Cluster, host: str, default_partition: bool) -> None:
    root = cluster.root
    ports = dict(zip(("mysql", "slurmdbd", "slurmctld", "slurmd"), _free_ports(4), strict=True))
    for name in ("munge", "state", "spool", "db"):
        (root / name).mkdir()
    key = root / "munge" / "munge.key"  # a fresh key: no other munged can talk to ours
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    munge_socket = root / "munge" / "munge.socket"
    _write(cluster.conf, _slurm_conf(cluster, ports, munge_socket, host, default_partition))
    _write(root / "slurmdbd.conf", _slurmdbd_conf(root, ports, munge_socket), 0o600)
    _write(root / "plugstack.conf", "")

    _start(
        cluster,
        "munged",
        [
            _which("munged"),
            "--foreground",
            f"--socket={munge_socket}",
            f"--key-file={key}",
            f"--pid-file={root}/munge/munged.pid",
            f"--log-file={root}/munged.log",
            f"--seed-file={root}/munge/seed",
        ],
        munge_socket.exists,
        "create its socket",
    )
    _start(
        cluster,
        "mariadbd",
        [
            _which("mariadbd"),
            "--no-defaults",
            f"--datadir={root}/db",
            "--user=root",
            "--skip-grant-tables",  # loopback only, no users: slurmdbd connects as root
            "--bind-address=127.0.0.1",
            f"--port={ports['mysql']}",
            f"--socket={root}/mysqld.sock",
            f"--pid-file={root}/mysqld.pid",
            "--innodb-buffer-pool-size=16M",
            "--innodb-log-file-size=4M",
            f"--log-error={root}/mariadbd.log",
        ],
        lambda: _port_open(ports["mysql"]),
        "accept connections",
    )
    _start(
        cluster,
        "slurmdbd",
        [_which("slurmdbd"), "-D"],
        lambda: _port_open(ports["slurmdbd"]),
        "accept connections",
    )
    _start(
        cluster,
        "slurmctld",
        [_which("slurmctld"), "-D", "-c", "-i"],
        lambda: cluster.command("scontrol", "ping", check=False).find("UP") >= 0,
        "answer scontrol ping",
    )
    _start(
        cluster,
        "slurmd",
        [_which("slurmd"), "-D", "-N", cluster.node],
        lambda: _node_state(cluster) == "idle",
        "register its node as idle",
    )


def _processes_of(cluster: Cluster) -> list[int]:
    """Pids (not ours) whose environment names this cluster: daemons, slurmstepd, jobs."""
    markers = (
        f"SLURM_THROWAWAY_CLUSTER={cluster.root}".encode(),
        f"SLURM_CONF={cluster.conf}".encode(),
    )
    mine, pids = {os.getpid(), os.getppid()}, []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(marker in environ for marker in markers):
            pids.append(int(entry.name))
    return pids


def stop(cluster: Cluster, keep: bool = False) -> None:
    """Cancel every job, stop the daemons (newest first), kill stragglers, remove the dir."""
    running = {name for name, process in cluster.daemons if process.poll() is None}
    if {"slurmctld", "slurmd"} <= running:
        with contextlib.suppress(Exception):
            jobs = cluster.jobs()
            if jobs:
                cluster.command("scancel", *jobs, check=False)
                cluster.wait_idle(STOP_TIMEOUT_S)
    for _name, process in reversed(cluster.daemons):
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for pid in _processes_of(cluster):  # slurmstepd and job steps outlive slurmd
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not keep:
        shutil.rmtree(cluster.root, ignore_errors=True)


@contextlib.contextmanager
def running(**options) -> Iterator[Cluster]:
    """A cluster for the duration of a with block; stopped even when the block fails."""
    cluster = start(**options)
    try:
        yield cluster
    finally:
        stop(cluster)


PROG = "slurm_cluster.py"


class _Refused(Exception):
    """A bad option: one line, exit 2 (argparse would print its usage first)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _Refused(message)


def _machine_memory_mb() -> int:
    """Physical memory of this machine: a one-node cluster cannot offer more."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2**20
    except (ValueError, OSError, AttributeError):
        return 2**40


PARTITION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
"""A partition name as slurm.conf takes it on one line (``PartitionName=...``): no
spaces, '=', '#' or newlines, which would end the value or start another setting."""


def check_partition(name: str) -> None:
    if not PARTITION_NAME.fullmatch(name):
        raise _Refused(
            f"--partition {name[:80]!r}: a letter or digit, then letters, digits, '_', '.' "
            "or '-' (at most 64)"
        )


def _check_node(cpus: int, memory_mb: int) -> None:
    most_cpus, most_mb = os.cpu_count() or 1, _machine_memory_mb()
    if not 1 <= cpus <= most_cpus:
        raise _Refused(f"--cpus must be in 1..{most_cpus} (this machine's CPUs), got {cpus}")
    if not 64 <= memory_mb <= most_mb:
        raise _Refused(
            f"--memory-mb must be in 64..{most_mb} (this machine's memory), got {memory_mb}"
        )


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except _Refused as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2


def _main(argv: list[str] | None) -> int:
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the one node (default 2)")
    parser.add_argument(
        "--memory-mb", type=int, default=2048, help="memory of the node in MB (default 2048)"
    )
    parser.add_argument("--partition", default="sweep", help="partition name (default sweep)")
    parser.add_argument(
        "--check", action="store_true", help="only say whether a cluster can run here (exit 0/1)"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG]...")
    args = parser.parse_args(argv)
    if args.check:
        reason = unavailable()
        print(f"slurm_cluster.py: {reason or 'a throwaway cluster can run here'}")
        return 1 if reason else 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    _check_node(args.cpus, args.memory_mb)
    check_partition(args.partition)
    try:
        cluster = start(args.cpus, args.memory_mb, args.partition)
    except ClusterError as exc:
        raise _Refused(" ".join(str(exc).split())) from None
    try:
        print(f"slurm_cluster.py: up; export SLURM_CONF={cluster.conf}", file=sys.stderr)
        if command:
            return subprocess.run(command, env=cluster.env).returncode
        print("slurm_cluster.py: Ctrl-C stops the cluster", file=sys.stderr)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        print("slurm_cluster.py: interrupted; stopping the cluster", file=sys.stderr)
        return 130
    finally:
        stop(cluster)


if __name__ == "__main__":
    sys.exit(main())
