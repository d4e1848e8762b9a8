"""The supervisor of one local spawn: it contains every process the command starts.

Run by :meth:`nodeprov_local.provider.LocalNode._spawn` as::

    python -I -S _supervisor.py CONTROL_PID STATUS_FD TERM_GRACE CWD -- COMMAND [ARG...]

or, *detached* (``NodeHandle.spawn_detached``), with ``0`` as CONTROL_PID and its standard
streams at ``/dev/null``: the supervisor then forks, the parent exits at once, and the child
supervises with no parent-death watchdog (what it contains outlives the control plane, not
the node: a destroy ends it as any recorded supervisor), reporting ``ok PID SUPERVISOR_PID``.

with the spawn's pipes as its stdin/stdout/stderr and the spawn's environment plus
``NODE_MARKER=NODE_ID`` (exactly: the command gets the environment this process was started
with, read back from ``/proc/self/environ``, since Python itself may add ``LC_CTYPE`` at
start-up, less the marker). The marker stays in the supervisor's own ``/proc/PID/environ``:
it proves to a later destroy that a recorded pid is this node's supervisor. Stdlib only,
Linux only.

**Containment.** The supervisor makes itself a *child subreaper*
(``PR_SET_CHILD_SUBREAPER``): a process orphaned anywhere below it is re-parented to it,
not to init, so whatever the command does (``setsid``, a double fork, ``nohup cmd &``) every
process it starts stays a descendant of the supervisor, found by following parent links in
``/proc``. A cgroup per node would contain them as well, but creating cgroups needs root or a
systemd delegation; a subreaper works for any user, and its parent-death signal gives the
watchdog below for free.

**Start.** The command is forked into its own process group, with what ``subprocess``
restores before exec (an empty signal mask; SIGPIPE, SIGXFSZ and SIGINT at their default),
in ``CWD``, and executed with a PATH lookup against the environment's PATH. The fork child
reports a failed ``chdir`` or ``exec`` through a close-on-exec pipe; the supervisor then
writes ``ok PID`` or ``STAGE ERRNO`` to ``STATUS_FD`` for the control plane. Right after the
fork the supervisor points its own stdin/stdout/stderr at ``/dev/null``: it holds no copy of
the command's pipes, so end-of-file and throughput are those of a plain child (nothing is
relayed).

**Signals from the control plane** (which signals only the supervisor, never its group):

- SIGTERM (also SIGINT, SIGHUP): the same signal to every descendant;
- SIGUSR1: SIGKILL to every descendant.

**When the command exits**, every process left below the supervisor gets SIGKILL (repeated
until none is left, all reaped), and the supervisor exits with the command's status; for a
command killed by signal N it re-raises N on itself (core dumps disabled), so the control
plane sees ``-N`` as for a plain child. After a SIGTERM (SIGINT, SIGHUP) was passed on, those
left get up to ``TERM_GRACE`` seconds first to do what it asked (a trap that cleans up), or
until SIGUSR1: the command dying first must not cut their own stopping short.

**Parent-death watchdog.** ``PR_SET_PDEATHSIG`` delivers SIGUSR2 when the control plane dies
(a ``getppid()`` check right after setting it closes the race with a death before that).
The signal also comes when merely the control-plane *thread* that started the supervisor
exits; ``getppid()`` then still names the control plane, and the signal is ignored. On a
real death every descendant gets SIGTERM, then SIGKILL once ``TERM_GRACE`` seconds have
passed (sooner if all are gone), and the supervisor exits. Bound: nothing of the node's
spawn outlives the control plane by more than ``TERM_GRACE`` + 1 s, save processes the
kernel cannot kill (uninterruptible sleep).

Not contained: processes a descendant asks *another* process to start (a system service
manager, a container engine, ``at``): they are not its descendants.
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import time

# Start-up time is spawn latency, so imports are few: `_signal` is `signal` without its
# enums (importing `enum` costs ~10 ms), and contextlib is not used (~9 ms).
TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    import signal
else:
    import _signal as signal

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36

KILL_ALL = signal.SIGUSR1  # from the control plane: SIGKILL to every descendant
PARENT_GONE = signal.SIGUSR2  # the parent-death signal
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # passed on to every descendant
WATCHED = {signal.SIGCHLD, KILL_ALL, PARENT_GONE, *FORWARDED}

# In the supervisor's environment only (the command does not get it): the node it serves.
NODE_MARKER = "NODEPROV_LOCAL_NODE"

# The exit status of a supervisor whose command could not be started; the control plane
# reads why from STATUS_FD, not from this.
START_FAILED = 127


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)):
        error = ctypes.get_errno()
        raise OSError(error, f"prctl({option}): {os.strerror(error)}")


def descendants(root: int) -> list[int]:
    """Every live process below ``root``, parents before their children, found by following
    the parent links in ``/proc``. Zombies are left out (they are dead; reaping ends them).

    A pid read here might, in theory, be reaped by its parent and recycled before it is
    signalled; that takes the kernel's pid counter wrapping round in that instant.
    """
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
        except OSError:
            continue  # exited meanwhile
        try:
            stat = os.read(fd, 1024)
        except OSError:
            continue
        finally:
            os.close(fd)
        # After the parenthesised command name: the state, then the parent's pid.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) < 2 or fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    queue = [root]
    while queue:
        below = children.get(queue.pop(), [])
        found += below
        queue += below
    return found


def _own_environment() -> dict[bytes, bytes]:
    """The environment this process was started with, byte for byte, less the node marker."""
    with open("/proc/self/environ", "rb") as f:
        entries = f.read().split(b"\0")
    env = dict(entry.split(b"=", 1) for entry in entries if b"=" in entry)
    env.pop(NODE_MARKER.encode(), None)
    return env


def _start(argv: list[str], cwd: str, status_fd: int) -> int | None:
    """Fork and exec the command; report to ``status_fd``. Its pid, or ``None`` if it failed."""
    env = _own_environment()
    failure_r, failure_w = os.pipe()  # close-on-exec: end-of-file here means exec succeeded
    try:
        pid = os.fork()
    except OSError as error:
        os.write(status_fd, f"fork {error.errno or 0}".encode())
        return None
    if pid == 0:  # the command-to-be
        stage, code = "setup", 0
        try:
            os.close(failure_r)
            os.close(status_fd)
            os.setpgid(0, 0)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
                signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            stage = "chdir"
            os.chdir(cwd)
            stage = "exec"
            os.execvpe(argv[0], argv, env)  # noqa: S606 - bytes env: exactly what we got
        except OSError as error:
            code = error.errno or 0
        except BaseException:  # noqa: BLE001 - anything at all must reach the parent
            code = 0
        os.write(failure_w, f"{stage} {code}".encode())
        os._exit(START_FAILED)
    os.close(failure_w)
    # Hold no copy of the command's pipes: its end-of-file must not wait for us.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    failure = b""
    while chunk := os.read(failure_r, 256):
        failure += chunk
    os.close(failure_r)
    if failure:
        os.waitpid(pid, 0)
        os.write(status_fd, failure)
        return None
    os.write(status_fd, f"ok {pid} {os.getpid()}".encode())
    os.close(status_fd)
    return pid


class Supervisor:
    """The wait loop: signals arrive through ``sigwaitinfo`` (all watched ones are blocked),
    so there are no Python signal handlers and no races with them."""

    def __init__(self, control_pid: int, command_pid: int, term_grace: float) -> None:
        self.control_pid = control_pid
        self.command_pid = command_pid
        self.term_grace = term_grace
        self.status: int | None = None  # the command's wait status once reaped
        self.stopping = False  # a SIGTERM (SIGINT, SIGHUP) was passed on

    def run(self) -> None:
        while self.status is None:
            self.handle(signal.sigwaitinfo(WATCHED).si_signo)
        if self.stopping:
            self.linger()
        self.kill_all()
        _exit_like(self.status)

    def handle(self, sig: int) -> None:
        if sig == signal.SIGCHLD:
            self.reap()
        elif sig == KILL_ALL:
            self.signal_all(signal.SIGKILL)
        elif sig == PARENT_GONE:
            if os.getppid() != self.control_pid:  # else a control-plane thread ended, no more
                self.orphaned()
        else:
            self.stopping = True
            self.signal_all(sig)

    def reap(self) -> bool:
        """Reap every child that has exited; whether any child (so any descendant) is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.command_pid:
                self.status = status

    def signal_all(self, sig: int) -> None:
        for pid in descendants(os.getpid()):
            try:  # noqa: SIM105 - no contextlib, see the imports
                os.kill(pid, sig)
            except OSError:
                pass  # exited meanwhile

    def kill_all(self) -> None:
        """SIGKILL every descendant, again and again, until all are reaped. Orphans come to
        us as their parents die, so each round sees what the last one's victims left."""
        while self.reap():
            self.signal_all(signal.SIGKILL)
            signal.sigtimedwait({signal.SIGCHLD}, 0.05)

    def linger(self) -> None:
        """Wait until every descendant is gone, for ``term_grace`` seconds at most, or until
        SIGUSR1."""
        deadline = time.monotonic() + self.term_grace
        while self.reap() and (left := deadline - time.monotonic()) > 0:
            info = signal.sigtimedwait(WATCHED, left)
            if info is not None and info.si_signo == KILL_ALL:
                break

    def orphaned(self) -> None:
        """The control plane died: SIGTERM to all, SIGKILL to all after the grace, exit."""
        self.signal_all(signal.SIGTERM)
        self.linger()
        self.kill_all()
        os._exit(1)  # nobody is left to read a status


def _exit_like(status: int) -> None:
    """Exit as the command did: the same exit status, or killed by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        # The command dumped core already if it was to; the supervisor must not.
        _prctl(PR_SET_DUMPABLE, 0)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # only if the signal did not end us
    os._exit(os.waitstatus_to_exitcode(status))


def main(argv: list[str]) -> None:
    control_pid, status_fd, term_grace, cwd = int(argv[1]), int(argv[2]), float(argv[3]), argv[4]
    command = argv[6:]  # after "--"
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    if control_pid == 0 and os.fork():  # detached: the control plane reaps the parent at once
        os._exit(0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if control_pid:
        _prctl(PR_SET_PDEATHSIG, PARENT_GONE)
        if os.getppid() != control_pid:
            os._exit(START_FAILED)  # the control plane died before the watch began: start nothing
    command_pid = _start(command, cwd, status_fd)
    if command_pid is None:
        os._exit(START_FAILED)
    Supervisor(control_pid, command_pid, term_grace).run()


if __name__ == "__main__":
    main(sys.argv)
