"""``neuron-mpirun``: mpiexec with the rank count, environment and abort-on-exception
an emulated Neuron topology needs.

    neuron-mpirun [--instance X] [--lnc L] [--nodes N] [-n RANKS] [--timeout S]
                  [--hostfile FILE | --host LIST] [--no-warm] [--dry-run]
                  [--] COMMAND [ARGS...]

* The rank count is what the topology implies (nodes x ranks per node); ``-n``
  overrides it and is checked against the topology (a world larger than one node must
  fill whole nodes).
* mpiexec is the package's own (beside sys.executable, from ``neuron-mpi[mpi]``), else
  the one on PATH.
* ``python prog.py`` runs as ``python -m mpi4py prog.py``: an uncaught exception on
  one rank then aborts the whole job (MPI_Abort) instead of leaving the others
  waiting forever. A bare ``python`` is this interpreter (sys.executable), so the
  venv need not be activated.
* The children see NEURON_MPI_INSTANCE / NEURON_LOGICAL_NC_CONFIG / NEURON_MPI_NODES,
  a shared NUMBA_CACHE_DIR (warmed once, in one process, before the launch) and the
  Open MPI settings for oversubscribing a small machine (and for running as root).

``build_command(args)`` is pure: it returns the argv and the environment additions and
runs nothing, so tests call it directly. ``main(argv)`` runs it.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from neuron_mpi import catalog as cat
from neuron_mpi.cli import add_topology_arguments
from neuron_mpi import env as settings
from neuron_mpi.env import default_numba_cache  # noqa: F401  (a public name here too)
from neuron_mpi.errors import NeuronMPIError

PROG = "neuron-mpirun"
TIMEOUT_STATUS = 124  # as coreutils timeout(1)

# Interpreter options that take a separate argument (python -X dev, -W error).
_PY_OPTS_WITH_ARG = {"-X", "-W", "--check-hash-based-pycs"}
_PYTHON_NAME = re.compile(r"^python(\d+(\.\d+)?)?$")

# The kernel warm-up: exit 0 warmed (or warm already, kernels.warmed: no numba
# imported), 3 when the package has no kernels.warm (yet).
WARM_CODE = (
    "import importlib, sys\n"
    "try:\n"
    "    k = importlib.import_module('neuron_mpi.kernels')\n"
    "except ModuleNotFoundError as e:\n"
    "    if e.name not in ('neuron_mpi', 'neuron_mpi.kernels'):\n"
    "        raise\n"
    "    sys.exit(3)\n"
    "if 'warmed' in vars(k) and k.warmed():\n"
    "    sys.exit(0)\n"
    "if not hasattr(k, 'warm'):\n"
    "    sys.exit(3)\n"
    "k.warm()\n"
)


class LaunchError(NeuronMPIError):
    """A launch that cannot start: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise LaunchError(f"{message} (see '{PROG} --help')")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        usage=f"{PROG} [options] [--] COMMAND [ARGS...]",
        description="Launch an MPI program on an emulated AWS Neuron topology: one MPI "
                    "rank per logical NeuronCore.",
        epilog="Example: neuron-mpirun --instance trn2.48xlarge -n 8 -- python prog.py. "
               "'python X' runs as 'python -m mpi4py X' so an uncaught exception on one "
               "rank aborts the job. Exit status: the job's (128+N if killed by signal "
               f"N; {TIMEOUT_STATUS} on --timeout; 2 for a bad launch).")
    add_topology_arguments(p, "what -n needs",
                           "; the children get the result in the same variables")
    p.add_argument("-n", "--np", dest="ranks", type=int, metavar="RANKS",
                   help="number of ranks (default: every rank of every node)")
    p.add_argument("--timeout", type=float, metavar="S",
                   help=f"kill the job after S seconds and exit {TIMEOUT_STATUS}")
    p.add_argument("--no-warm", dest="warm", action="store_false",
                   help="skip compiling the numba kernels into NUMBA_CACHE_DIR before "
                        "the launch")
    p.add_argument("--dry-run", action="store_true",
                   help="print the command line and environment additions; run nothing")
    h = p.add_argument_group(
        "several hosts", "One emulated node per host: mpiexec gets the hosts, "
        "--map-by ppr:<ranks per node>:node, and -x for every NEURON_MPI_*/NEURON_* "
        "and NUMBA_CACHE_DIR variable (Open MPI does not forward the environment to "
        "other hosts by itself). Ranks on one host move data through shared memory, "
        "hosts talk over MPI (the EFA hops).")
    h.add_argument("--hostfile", metavar="FILE", help="Open MPI hostfile ('host slots=N' lines)")
    h.add_argument("--host", metavar="LIST", help="comma-separated hosts, e.g. a:64,b:64")
    p.add_argument("--mpiexec", metavar="PATH",
                   help="the mpiexec to run (default: the one beside this Python, else "
                        "PATH)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="COMMAND",
                   help="the program and its arguments")
    return p


def parse_args(argv) -> argparse.Namespace:
    """Options, then the command (after '--', or from the first non-option word)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        args = build_parser().parse_args(argv[:i])
        if args.command:
            raise LaunchError(f"unexpected arguments before '--': {' '.join(args.command)}")
        args.command = argv[i + 1:]
    else:
        args = build_parser().parse_args(argv)
    if not args.command:
        raise LaunchError("no command to run (e.g. neuron-mpirun -n 8 python prog.py)")
    if args.timeout is not None and args.timeout <= 0:
        raise LaunchError(f"--timeout: expected a positive number of seconds, got {args.timeout:g}")
    return args


# --- pieces of the launch ------------------------------------------------------------
def find_mpiexec(explicit: str | None = None) -> str:
    """The package's mpiexec (beside sys.executable), else mpiexec on PATH."""
    if explicit:
        path = shutil.which(explicit)
        if path is None:
            raise LaunchError(f"--mpiexec: {explicit!r} not found")
        return path
    beside = Path(sys.executable).parent / "mpiexec"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    path = shutil.which("mpiexec")
    if path is None:
        raise LaunchError("no mpiexec found beside this Python or on PATH; install the "
                          "bundled Open MPI with: pip install 'neuron-mpi[mpi]'")
    return path


def is_python(word: str) -> bool:
    return bool(_PYTHON_NAME.match(Path(word).name)) or (
        os.path.abspath(word) == os.path.abspath(sys.executable))


def own_python(command: list[str]) -> list[str]:
    """A bare ``python`` / ``python3`` / ``python3.X`` (this version) becomes
    sys.executable: the interpreter neuron-mpirun is installed in, which has mpi4py
    and neuron_mpi, even when its environment is not activated. Paths stay as given."""
    if not command or os.sep in command[0] or not sys.executable:
        return list(command)
    major, minor = sys.version_info[:2]
    if command[0] in ("python", f"python{major}", f"python{major}.{minor}"):
        return [sys.executable] + list(command[1:])
    return list(command)


def with_mpi4py(command: list[str]) -> list[str]:
    """``python [opts] X ...`` -> ``python [opts] -m mpi4py X ...`` where X is a script,
    ``-m mod``, ``-c code`` or ``-``; anything else is returned unchanged."""
    command = list(command)
    if not command or not is_python(command[0]):
        return command
    i = 1
    while i < len(command):
        word = command[i]
        if word in ("-m", "-c"):
            if word == "-m" and i + 1 < len(command) and command[i + 1] == "mpi4py":
                return command  # already wrapped
            break
        if word == "-" or not word.startswith("-"):
            break  # the script (or stdin)
        if word[:2] in ("-m", "-c"):  # -mmod / -ccode: split, as mpi4py wants them apart
            if word == "-mmpi4py":
                return command
            command[i:i + 1] = [word[:2], word[2:]]
            break
        if word in _PY_OPTS_WITH_ARG:
            i += 2
            continue
        i += 1
    else:
        return command  # interactive python: nothing to wrap
    return command[:i] + ["-m", "mpi4py"] + command[i:]


def resolve_world(instance, lnc, nodes, ranks):
    """(topology, ranks): the topology the flags and env give, checked against -n."""
    from neuron_mpi.topology import Topology, resolve

    instance, lnc, nodes = resolve(instance, lnc, nodes)
    per_node = Topology(instance, lnc, 1).ranks_per_node
    if ranks is None:
        ranks = (1 if nodes is None else max(nodes, 1)) * per_node
    elif ranks < 1:
        raise LaunchError(f"-n: expected a positive number of ranks, got {ranks}")
    if nodes is None:
        if ranks > per_node and cat.instance_spec(instance).efa is None:
            raise LaunchError(
                f"-n: {instance} at LNC={lnc} holds at most {per_node} ranks and has no EFA "
                f"to span nodes, got {ranks}")
        nodes = max(1, -(-ranks // per_node))
    return Topology(instance, lnc, nodes, ranks), ranks


def build_command(args) -> tuple[list[str], dict[str, str]]:
    """The mpiexec argv and the environment additions for the children.

    ``args`` is a parsed namespace or a list of command-line words. Runs nothing;
    raises LaunchError / TopologyError for a launch that cannot work.
    """
    if not isinstance(args, argparse.Namespace):
        args = parse_args(args)
    topo, ranks = resolve_world(args.instance, args.lnc, args.nodes, args.ranks)
    env: dict[str, str] = {}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    # Open MPI 5 (PRRTE) ignores OMPI_MCA_rmaps_base_oversubscribe; this lets a
    # 2-core machine run 64 ranks. Open MPI then yields when idle by itself.
    env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
    env["NEURON_MPI_INSTANCE"] = topo.instance
    env["NEURON_LOGICAL_NC_CONFIG"] = str(topo.lnc)
    env["NEURON_MPI_NODES"] = str(topo.nodes)
    if not settings.numba_cache_dir():
        env["NUMBA_CACHE_DIR"] = settings.default_numba_cache()
    argv = [find_mpiexec(getattr(args, "mpiexec", None)), "-n", str(ranks)]
    hostfile, hosts = getattr(args, "hostfile", None), getattr(args, "host", None)
    if hostfile and hosts:
        raise LaunchError("--hostfile and --host: give one of them")
    if hostfile or hosts:
        if hostfile and not os.path.isfile(hostfile):
            raise LaunchError(f"--hostfile: {hostfile!r} not found")
        argv += ["--hostfile", hostfile] if hostfile else ["--host", hosts]
        argv += ["--map-by", f"ppr:{topo.ranks_per_node}:node:oversubscribe"]
        names = sorted(set(env) | set(settings.forwarded()))
        for k in names:
            argv += ["-x", k]
    argv += with_mpi4py(own_python(args.command))
    return argv, env


def warm_command(command: list[str]) -> list[str]:
    """One process that compiles the kernels into the cache the ranks will load:
    the command's own Python when it is one, else this one."""
    command = own_python(command)
    python = command[0] if command and is_python(command[0]) else sys.executable
    return [python, "-c", WARM_CODE]


# --- running -------------------------------------------------------------------------
def _status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _warm(cmd: list[str], env: dict[str, str]) -> None:
    cache = env.get("NUMBA_CACHE_DIR")
    if cache:
        Path(cache).mkdir(parents=True, exist_ok=True)
    try:
        res = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    except OSError as e:
        sys.stderr.write(f"{PROG}: warning: kernel warm-up not run ({e})\n")
        return
    if res.returncode not in (0, 3):
        last = (res.stderr.strip().splitlines() or ["no message"])[-1]
        sys.stderr.write(f"{PROG}: warning: kernel warm-up failed, ranks will compile "
                         f"their own kernels: {last}\n")


def _run(argv: list[str], env: dict[str, str], timeout: float | None) -> int:
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as e:
        raise LaunchError(f"cannot run {argv[0]}: {e}") from None
    try:
        return _status(proc.wait(timeout=timeout))
    except subprocess.TimeoutExpired:
        sys.stderr.write(f"{PROG}: error: the job ran past --timeout {timeout:g} s; "
                         "stopping it\n")
        proc.send_signal(signal.SIGTERM)  # mpiexec passes it on to every rank
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return TIMEOUT_STATUS
    except KeyboardInterrupt:  # mpiexec got the SIGINT too; let it wind the job down
        try:
            return _status(proc.wait(timeout=10))
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.kill()
            proc.wait()
            return 128 + signal.SIGINT


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = parse_args(argv)
        cmd, additions = build_command(args)
        warm = warm_command(args.command) if args.warm else None
        if args.dry_run:
            for k, v in additions.items():
                print(f"{k}={shlex.quote(v)}")
            if warm:
                print("# warm-up: " + " ".join(map(shlex.quote, warm[:2])) + " '...'")
            print(shlex.join(cmd))
            return 0
        env = settings.for_children(additions)
        if warm:
            _warm(warm, env)
        return _run(cmd, env, args.timeout)
    except NeuronMPIError as e:
        sys.stderr.write(f"{PROG}: error: {e}\n")
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
