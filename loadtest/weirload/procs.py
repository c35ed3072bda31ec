"""Processes the run starts, and what /proc says about them.

Every process is started in a session of its own, so its pid is also the id
of its process group; stopping it signals that group (an nginx master and its
workers go together). Every started process is kept in `REGISTRY` until it is
stopped, and `stop_all()` runs on normal exit, on error and on SIGINT/SIGTERM.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")

REGISTRY: list["Proc"] = []

# Requests of the run go to 127.0.0.1 directly, whatever http_proxy says.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class StartError(RuntimeError):
    """A process did not start or did not become ready."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_layout(pin: bool) -> tuple[set[int] | None, set[int] | None]:
    """(CPUs for the measured server, CPUs for everything else).

    With `pin` and at least two CPUs, the measured server gets the highest
    CPU this process may use and the origin, the load generator and this
    script get the others, so the server's budget is one whole core that
    nothing else in the run takes. Otherwise (None, None): no pinning.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if not pin or len(cpus) < 2:
        return None, None
    return {cpus[-1]}, set(cpus[:-1])


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def process_tree(pid: int) -> list[int]:
    """`pid` and all its descendants that are alive now."""
    children = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def cpu_ticks(pids: list[int]) -> int:
    """utime + stime of `pids` (all their threads), in clock ticks."""
    total = 0
    for p in pids:
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total


def hwm_kib(pids: list[int]) -> int:
    """Sum of VmHWM (peak resident set size) of `pids`, in KiB."""
    total = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total


def reset_hwm(pids: list[int]) -> None:
    """Resets VmHWM of `pids` to their current RSS (`5` > clear_refs, Linux 4.0+)."""
    for p in pids:
        try:
            Path(f"/proc/{p}/clear_refs").write_text("5")
        except OSError:
            pass


def system_busy_ticks() -> tuple[int, int]:
    """(busy, steal) ticks of all CPUs since boot, from /proc/stat.

    Busy is user + nice + system + irq + softirq + steal: every tick a CPU
    was not idle or waiting for I/O.
    """
    with open("/proc/stat") as f:
        fields = f.readline().split()
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
    return user + nice + system + irq + softirq + steal, steal


# The signals that end a run; blocked while a child is started and
# registered, so an interrupt cannot leave an unregistered child behind.
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
_PR_SET_PDEATHSIG = 1
try:
    _LIBC = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _child_setup(cpus: set[int] | None):
    """What a child does between fork and exec: take its CPUs, ask for
    SIGKILL if this script dies without stopping it, and unblock the stop
    signals it inherited blocked."""

    def setup():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    return setup


def _spawn(argv: list[str], name: str, log: Path, cpus: set[int] | None, **kwargs) -> "Proc":
    """Starts `argv` in a session of its own and registers it, with the stop
    signals blocked until it is registered."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_child_setup(cpus),
            **kwargs,
        )
        proc = Proc(name, popen, log)
        REGISTRY.append(proc)
        return proc
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@dataclass
class Proc:
    """A started process: its name in the report, pid and log file."""

    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def exit_text(self) -> str:
        """How it ended: `exit status N` or `killed by signal N`."""
        code = self.popen.poll()
        if code is None:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit status {code}"

    def tree(self) -> list[int]:
        return process_tree(self.pid) if self.alive() else []

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM to the process group, SIGKILL after `grace` seconds."""
        if self.alive():
            _signal_group(self.pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                _signal_group(self.pid, signal.SIGKILL)
                self.popen.wait(timeout=grace)
        # Workers that outlived their master.
        _signal_group(self.pid, signal.SIGKILL)
        if self in REGISTRY:
            REGISTRY.remove(self)


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def start(name: str, argv: list[str], log: Path, cpus: set[int] | None) -> Proc:
    """Starts `argv` in its own session, output to `log`, on `cpus`."""
    with open(log, "wb") as out:
        try:
            return _spawn(argv, name, log, cpus, stdout=out, stderr=subprocess.STDOUT)
        except (OSError, subprocess.SubprocessError) as e:
            raise StartError(f"{name}: cannot run {argv[0]}: {e}") from e


def wait_http(proc: Proc, url: str, timeout: float = 15.0) -> None:
    """Waits until `url` answers any HTTP status; raises StartError if the
    process exits or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not proc.alive():
            raise StartError(f"{proc.name} ended while starting ({proc.exit_text()}); its log:\n{proc.log_tail()}")
        try:
            # The status line is enough; the body is not read.
            with _NO_PROXY.open(url, timeout=2):
                pass
            return
        except urllib.error.HTTPError:
            return
        except (OSError, urllib.error.URLError) as e:
            last = str(e)
        time.sleep(0.05)
    raise StartError(f"{proc.name} did not answer {url} within {timeout:.0f} s ({last}); log:\n{proc.log_tail()}")


def stop_all(final: bool = True) -> None:
    """Stops every process still registered, newest first, with the stop
    signals held off meanwhile, so a second Ctrl-C cannot cut the cleanup
    short. `final`: they stay ignored afterwards (the run is ending);
    otherwise one that arrived is delivered once everything is stopped."""
    if final:
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        for proc in reversed(list(REGISTRY)):
            try:
                proc.stop()
            except Exception:  # noqa: BLE001 - best effort
                pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def install_signal_handlers() -> None:
    """SIGINT, SIGTERM and SIGHUP unwind the run (so `finally` blocks stop
    processes)."""

    def handler(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in STOP_SIGNALS:
        signal.signal(sig, handler)


@dataclass
class ChildResult:
    """A finished load-generator run."""

    returncode: int
    cpu_seconds: float
    stdout: str
    stderr: str
    timed_out: bool


def run_child(argv: list[str], workdir: Path, cpus: set[int] | None, timeout: float) -> ChildResult:
    """Runs `argv` to its end (killed after `timeout` s) and returns its
    output and the CPU time it used (its rusage, from wait4)."""
    out_path, err_path = workdir / "child.out", workdir / "child.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = _spawn(argv, argv[0], err_path, cpus, stdout=out, stderr=err)
    popen = proc.popen
    timed_out = threading.Event()

    def watchdog():
        timed_out.set()
        _signal_group(popen.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, watchdog)
    timer.start()
    try:
        _, status, usage = os.wait4(popen.pid, 0)
    except BaseException:
        # Ctrl-C or an error while waiting: the generator goes too.
        _signal_group(popen.pid, signal.SIGKILL)
        popen.wait()
        raise
    finally:
        timer.cancel()
        REGISTRY.remove(proc)
    popen.returncode = os.waitstatus_to_exitcode(status)
    return ChildResult(
        returncode=popen.returncode,
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        stdout=out_path.read_text(errors="replace"),
        stderr=err_path.read_text(errors="replace"),
        timed_out=timed_out.is_set(),
    )
