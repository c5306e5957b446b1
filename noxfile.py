"""The one task runner. ``python3 tools/ci.py`` (what CI and the README run) runs nox's default set and prints the
summary table; ``nox --list`` shows every session.

Every session installs torch through ``tools/constraints/`` so that pip takes the CPU build on disk instead of
downloading a CUDA build of several GB.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import nox

nox.needs_version = ">=2024.3.2"
# The default set is CI: the matrix runs once, in matrix_env(...) sessions (one venv per distinct minimal package
# set), not inside ``tests``; the cpu-horovod cells run in ``horovod``. tools/ci_summary.py checks the cells.
nox.options.sessions = ["lint", "types", "tests", "build", "docs", "api", "horovod", "matrix_env"]
nox.options.reuse_venv = "yes"

ROOT = Path(__file__).parent
TORCH = str(ROOT / "tools" / "constraints" / "torch-2.13.txt")
XLA = str(ROOT / "tools" / "constraints" / "xla.txt")
HOROVOD = str(ROOT / "tools" / "constraints" / "horovod.txt")
PACKAGES = sorted(p.parent.name for p in (ROOT / "packages").glob("*/pyproject.toml"))
MEMBERS = [p for p in PACKAGES if p != "xtrain"]
# The extras the tests and the type check install: the optional integrations are tested against the real libraries.
INTEGRATIONS = ("cli", "test", "tensorboard", "tuner", "onnx", "migrate", "wandb", "mlflow", "metrics")


def _editable(*extras: str) -> list[str]:
    """Every member package, editable, in one pip call so the resolver never fetches a released sibling."""
    args: list[str] = []
    for name in MEMBERS:
        wanted = [e for e in extras if e in _extras(name)]
        args += ["-e", f"packages/{name}[{','.join(wanted)}]" if wanted else f"packages/{name}"]
    return args


def _pytest(session: nox.Session, *args: str, env: dict[str, str] | None = None) -> None:
    """pytest with a junit XML under build/ci/junit/<session>/, from which tools/ci_summary.py counts the results."""
    folder = ROOT / "build" / "ci" / "junit" / session.name
    folder.mkdir(parents=True, exist_ok=True)
    junit = folder / f"{len(list(folder.glob('*.xml')))}.xml"
    # xunit1: test_matrix.py's record_property (each cell's declared outcome) is only valid XML there
    session.run("pytest", f"--junitxml={junit}", "-o", "junit_family=xunit1", *args, env=env)


def _pytest_each(session: nox.Session, *runs: tuple[list[str], dict[str, str] | None]) -> list[str]:
    """Several pytest runs that all run even when one fails (one failure must not hide the others' results); returns
    the failed ones for :func:`_fail_if`."""
    failed = []
    for args, env in runs:
        try:
            _pytest(session, *args, env=env)
        except nox.command.CommandFailed:
            failed.append(" ".join(args))
    return failed


def _fail_if(failed: list[str]) -> None:
    if failed:
        raise nox.command.CommandFailed(f"pytest failed: {'; '.join(failed)}")


def _extras(name: str) -> set[str]:
    import tomllib

    data = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())
    return set(data["project"].get("optional-dependencies", {}))


@nox.session(python=False)
def lint(session: nox.Session) -> None:
    """ruff over the whole repository."""
    session.run(sys.executable, "-m", "pip", "install", "-q", "ruff>=0.6", external=True)
    session.run(sys.executable, "-m", "ruff", "check", ".", external=True)


@nox.session
def types(session: nox.Session) -> None:
    """mypy --strict on every package's src/, with every optional integration installed (their types are checked)."""
    session.install("-c", TORCH, "mypy>=1.10", "torch==2.13.0", *_editable(*INTEGRATIONS))
    session.run("mypy", *[f"packages/{name}/src/xtrain" for name in MEMBERS])
    # Users' code against the public annotations: correct code checks clean, mistakes stay errors.
    session.run("mypy", "--warn-unused-ignores", "packages/xtrain-core/tests/typing/user_code.py")


# Test files that pip-install throwaway distributions from docs/examples/ (same source trees): run one at a time.
SERIAL_TESTS = ("tests_integration/test_bad_input.py", "tests_integration/test_third_party_plugin.py",
                "tests_integration/test_plugin_guides.py")


@nox.session
def tests(session: nox.Session) -> None:
    """Each package's unit tests, then tests_integration/ (multi-process tests included, each bounded), on 2 xdist
    workers (whole files per worker), then SERIAL_TESTS alone. The matrix is left to the matrix_env sessions.
    ``nox -s tests -- <pytest args>`` runs just those arguments, in one process."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable(*INTEGRATIONS), "pytest-timeout", "pytest-xdist",
                    "scikit-learn", "griffe>=1.0")
    if session.posargs:
        session.run("pytest", *session.posargs)
        return
    ignored = [f"--ignore={path}" for path in (*SERIAL_TESTS, "tests_integration/test_matrix.py")]
    _fail_if(_pytest_each(session, (["-n", "2", "--dist", "loadfile", "--durations=15", *ignored], None),
                          (list(SERIAL_TESTS), None)))


@nox.session
def hangs(session: nox.Session) -> None:
    """Every hang-detection run (tests_integration/test_hangs.py): stuck ranks under each launcher, ~13 minutes on a busy 2-core machine."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("cli", "test"), "pytest-timeout")
    session.run("pytest", "tests_integration/test_hangs.py", "-m", "hangs", "-s", *session.posargs,
                env={"XTRAIN_HANG_TESTS": "1"})


@nox.session
def lightning_scripts(session: nox.Session) -> None:
    """The Lightning-style scripts rewritten by ``xtrain migrate``, trained on 2 processes too. Not in the default set."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("cli", "test", "tensorboard", "migrate"),
                    "pytest-timeout")
    session.run("pytest", "tests_integration/test_migrate_scripts.py", *session.posargs,
                env={"XTRAIN_LIGHTNING_SCRIPTS": "1"})


@nox.session
def self_healing(session: nox.Session) -> None:
    """Restarts (xtrain launcher, torchrun), a deterministic failure and an elastic 2 -> 1 torchrun job, with real
    processes (tests_integration/test_self_healing.py, about 4 minutes). Not in the default set."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("cli", "test", "tensorboard"), "pytest-timeout")
    session.run("pytest", "tests_integration/test_self_healing.py", "-m", "self_healing", "-s", *session.posargs,
                env={"XTRAIN_SELF_HEALING_TESTS": "1"})


@nox.session
def build(session: nox.Session) -> None:
    """Build every wheel and sdist, then prove xtrain-core's wheel alone (plus torch) trains on CPU."""
    session.install("build>=1.2", "hatchling>=1.25")
    dist = ROOT / "dist"
    for name in PACKAGES:
        session.run("python", "-m", "build", "--no-isolation", "--outdir", str(dist), f"packages/{name}")
    session.run("python", "tools/check_wheels.py", str(dist))
    tmp = Path(session.create_tmp())
    venv = tmp / "core-only"
    session.run("python", "-m", "venv", "--clear", str(venv))
    py = str(venv / "bin" / "python")
    core_wheel = next(dist.glob("xtrain_core-*.whl"))
    session.run(py, "-m", "pip", "install", "-q", "-c", TORCH, "torch==2.13.0", str(core_wheel), external=True)
    session.run(py, "tools/smoke_core_only.py", external=True)
    # + xtrain-strategies only: ddp trains, bf16-mixed asks for xtrain-precision.
    strategies_wheel = next(dist.glob("xtrain_strategies-*.whl"))
    session.run(py, "-m", "pip", "install", "-q", "--no-deps", str(strategies_wheel), external=True)
    session.run(py, "tools/smoke_core_strategies.py", external=True)
    # The meta-package alone, resolved from the built wheels, brings every package.
    meta = tmp / "meta"
    session.run("python", "-m", "venv", "--clear", str(meta))
    session.run(str(meta / "bin" / "python"), "-m", "pip", "install", "-q", "-c", TORCH, "torch==2.13.0",
                "isal>=1.6", external=True)  # xtrain-core's other dependency (the wheels below come --no-index)
    session.run(str(meta / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(dist),
                "xtrain", external=True)  # only our wheels: never a same-named release from an index
    session.run(str(meta / "bin" / "python"), "tools/smoke_meta.py", external=True)


@nox.session
def docs(session: nox.Session) -> None:
    """The documentation site, built with mkdocs in strict mode (any warning fails); the plugin catalogue is generated
    from the installed packages' entry points."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("cli"), "mkdocs>=1.6", "mkdocs-material>=9.5",
                    "mkdocstrings[python]>=0.26")
    session.env["NO_MKDOCS_2_WARNING"] = "1"
    session.run("mkdocs", "build", "--strict", "--site-dir", str(Path(session.create_tmp()) / "site"))


@nox.session(python=False)
def api(session: nox.Session) -> None:
    """Each package's public API against its last release tag (griffe): a break needs a major bump. Also checks the
    inter-package pins and the meta-package's ranges."""
    session.run(sys.executable, "-m", "pip", "install", "-q", "griffe>=1.0", external=True)
    session.run(sys.executable, "tools/check_api.py", external=True)
    session.run(sys.executable, "tools/release.py", "--check", external=True)


@nox.session
def xla(session: nox.Session) -> None:
    """XLA for real on the CPU (``PJRT_DEVICE=CPU``) with the pinned torch/torch-xla pair. Not in the default set.

    torch-xla 2.9.0 works only with torch 2.9.x, and PyPI's torch 2.9.1 is a CUDA build (about 4.2 GB, 2 minutes,
    7 GB of disk), so this session installs only what its tests need: xtrain-core, xtrain-accelerators[xla] and the
    pinned pair from ``tools/constraints/xla.txt``. ``nox -s xla -- -k spmd`` passes arguments on to pytest.
    """
    session.install("-c", XLA, "torch==2.9.1", "torch-xla==2.9.0", "pytest-timeout",
                    "-e", "packages/xtrain-core[test]", "-e", "packages/xtrain-accelerators[xla,test]")
    session.run("python", "-c", "import torch, torch_xla; print('torch', torch.__version__, 'torch_xla', "
                "torch_xla.__version__)", env={"PJRT_DEVICE": "CPU"})
    session.run("pytest", "packages/xtrain-accelerators/tests", *session.posargs,
                env={"PJRT_DEVICE": "CPU", "XTRAIN_REQUIRE_XLA": "1"})


# -- the accelerator x strategy matrix ---------------------------------------------------------------------------------
def _entry_points(group: str) -> dict[str, tuple[str, str]]:
    """``name -> (distribution, target)`` for an entry-point group, read from the packages' pyproject files (nox runs
    before anything is installed, so the registry itself cannot be asked)."""
    import tomllib

    found: dict[str, tuple[str, str]] = {}
    for name in MEMBERS:
        data = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())
        for entry, target in data["project"].get("entry-points", {}).get(group, {}).items():
            found[entry] = (name, target)
    return found


def _matrix_groups() -> list[str]:
    """``<accelerator>-<strategy>`` for every canonical accelerator (aliases such as ``tpu`` and factories such as
    ``gpu`` left out) and every strategy."""
    seen: set[str] = set()
    canonical = []
    for name, (_, target) in _entry_points("xtrain.accelerators").items():
        if target.rsplit(":", 1)[1][:1].isupper() and target not in seen:
            seen.add(target)
            canonical.append(name)
    return [f"{a}-{s}" for a in canonical for s in sorted(_entry_points("xtrain.strategies"))]


MATRIX_GROUPS = _matrix_groups()
_BACKEND_CONSTRAINTS = {"xla": (str(ROOT / "tools" / "constraints" / "xla.txt"), ["torch==2.9.1", "torch-xla==2.9.0"])}


def _needed(group: str) -> list[str]:
    """The distributions a group's cells need: xtrain-core, xtrain-precision and the providers of both plugins."""
    accelerator, strategy = group.split("-", 1)
    return sorted({"xtrain-core", "xtrain-precision", _entry_points("xtrain.accelerators")[accelerator][0],
                   _entry_points("xtrain.strategies")[strategy][0]})


@nox.session
@nox.parametrize("group", MATRIX_GROUPS, ids=MATRIX_GROUPS)
def matrix(session: nox.Session, group: str) -> None:
    """One accelerator-strategy group of tests_integration/matrix.py, installing only the packages its cells need:
    xtrain-core, the packages providing the accelerator and the strategy, and xtrain-precision."""
    accelerator, strategy = group.split("-", 1)
    needed = _needed(group)
    constraints, pins = _BACKEND_CONSTRAINTS.get(accelerator, (TORCH, ["torch==2.13.0"]))
    if strategy == "horovod":
        constraints = HOROVOD
    extras = {"xtrain-core": "[test]", "xtrain-accelerators": "[xla]" if accelerator == "xla" else ""}
    session.install("-c", constraints, *pins, "pytest-timeout",
                    *[arg for name in sorted(needed) for arg in ("-e", f"packages/{name}{extras.get(name, '')}")])
    if strategy == "horovod" and accelerator == "cpu":
        session.run("python", "tools/build_horovod.py")  # cached wheel after the first build
    env = {"XTRAIN_MATRIX_GROUPS": group}
    if accelerator == "xla":
        env["PJRT_DEVICE"] = "CPU"
    session.run("pytest", "tests_integration/test_matrix.py", "-q", *session.posargs, env=env)


def _matrix_envs() -> dict[str, list[str]]:
    """CI's matrix: the groups, by their minimal package set, so equal sets share one venv and one pytest run.

    Named after the packages besides xtrain-core and xtrain-precision (``core`` when none). ``cpu-horovod`` is left
    to the ``horovod`` session (its venv has Horovod built in). The ``xla-*`` groups go with the torch-2.13 sets,
    without torch-xla: their refusals are checked and their runnable cells are reported skipped ("accelerator 'xla'
    is not available"), because torch-xla's pinned torch 2.9.1 is a 4.2 GB CUDA download (``nox -s xla`` runs XLA).
    """
    envs: dict[str, list[str]] = {}
    for group in MATRIX_GROUPS:
        if group in HOROVOD_GROUPS:
            continue
        extra = [n.removeprefix("xtrain-") for n in _needed(group) if n not in ("xtrain-core", "xtrain-precision")]
        envs.setdefault("-".join(extra) or "core", []).append(group)
    return envs


HOROVOD_GROUPS = ("cpu-horovod",)
MATRIX_ENVS = _matrix_envs()


@nox.session
@nox.parametrize("packages", list(MATRIX_ENVS), ids=list(MATRIX_ENVS))
def matrix_env(session: nox.Session, packages: str) -> None:
    """Every matrix group whose minimal install is xtrain-core + xtrain-precision + ``packages``, in one venv: the
    same cells as the matrix(<group>) sessions, one pytest run per package set instead of one venv per group."""
    names = ["xtrain-core", "xtrain-precision"] + ([] if packages == "core" else
                                                   [f"xtrain-{p}" for p in packages.split("-")])
    extras = {"xtrain-core": "[test]"}
    session.install("-c", TORCH, "torch==2.13.0", "pytest-timeout",
                    *[arg for name in sorted(names) for arg in ("-e", f"packages/{name}{extras.get(name, '')}")])
    _pytest(session, "tests_integration/test_matrix.py", "-q", *session.posargs,
            env={"XTRAIN_MATRIX_GROUPS": ",".join(MATRIX_ENVS[packages])})


@nox.session
def compatibility(session: nox.Session) -> None:
    """Run the whole CPU matrix and regenerate docs/compatibility.md from its result."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("test"), "pytest-timeout")
    session.run("pytest", "tests_integration/test_matrix.py", "-q")
    session.run("python", "tools/gen_compatibility.py")


@nox.session
def oldest_core(session: nox.Session) -> None:
    """Each plugin package's tests against the oldest xtrain-core its pin allows.

    The floor comes from the plugin's ``xtrain-core>=X,<Y`` requirement. When the working tree's core is that version
    it is used as is; otherwise core is exported from its release tag ``xtrain-core-vX`` (a missing tag is an error,
    not a silent pass).
    """
    import re
    import subprocess
    import tomllib

    core_version = re.search(r'__version__ = "([^"]+)"',
                             (ROOT / "packages/xtrain-core/src/xtrain/core/__about__.py").read_text()).group(1)  # type: ignore[union-attr]
    for plugin in [p for p in MEMBERS if p != "xtrain-core"]:
        deps = tomllib.loads((ROOT / "packages" / plugin / "pyproject.toml").read_text())["project"]["dependencies"]
        floor = next(re.search(r">=\s*([\d.]+)", d).group(1) for d in deps if d.startswith("xtrain-core"))  # type: ignore[union-attr]
        floor_full = ".".join([*floor.split("."), "0", "0"][:3])
        if floor_full == core_version:
            core_source = "packages/xtrain-core"
        else:
            tag = f"xtrain-core-v{floor_full}"
            target = Path(session.create_tmp()) / tag
            if subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=ROOT).returncode:
                session.error(f"{plugin} allows xtrain-core {floor_full}, but there is no tag {tag} to test it against")
            target.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(["git", "archive", tag, "packages/xtrain-core"], cwd=ROOT, capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
            core_source = str(target / "packages" / "xtrain-core")
        session.log(f"{plugin}: testing against xtrain-core {floor_full} ({core_source})")
        session.install("-c", TORCH, "torch==2.13.0", "pytest-timeout", f"{core_source}[test]",
                        "-e", f"packages/{plugin}[test]" if "test" in _extras(plugin) else f"packages/{plugin}")
        session.run("pytest", f"packages/{plugin}/tests", "-q", "-x", *session.posargs)


@nox.session
def horovod(session: nox.Session) -> None:
    """Horovod for real on the CPU: 2 ranks over Gloo, started by xtrain, by ``horovodrun`` and by ``mpirun``.

    Horovod 0.28.1 must be compiled against the pinned torch (``tools/constraints/horovod.txt``):
    ``tools/build_horovod.py`` builds it once (about 4.5 minutes on 2 cores; MPI too when ``mpicxx`` exists) and
    caches the wheel under ``~/.cache/xtrain/horovod`` (``XTRAIN_CACHE``), so later runs and reused venvs install it in
    seconds. It also runs the Horovod cases of ``tests_integration/test_hangs.py`` (a stuck rank, a barrier on one rank)
    and ``tests_integration/test_collective_check.py``. ``nox -s horovod -- -k launch`` passes arguments on to pytest.
    It starts with the matrix's ``cpu-horovod`` cells in their minimal install (core, precision, strategies; in CI
    they run here and nowhere else), so ``build/matrix-report.json`` (and ``docs/compatibility.md``) records them as
    run; then it installs every package for the Horovod tests. In the default set (CI), so a break of Horovod fails CI.
    """
    session.install("-c", HOROVOD, "torch==2.13.0", "pytest-timeout", *[
        arg for name in _needed("cpu-horovod") for arg in ("-e", f"packages/{name}[test]" if "test" in _extras(name)
                                                            else f"packages/{name}")])  # the cells' minimal install
    session.run("python", "tools/build_horovod.py")
    failed = _pytest_each(session, (["tests_integration/test_matrix.py", "-q"],
                                    {"XTRAIN_MATRIX_GROUPS": ",".join(HOROVOD_GROUPS)}))
    session.install("-c", HOROVOD, "torch==2.13.0", *_editable("test"))
    failed += _pytest_each(session, (["-m", "horovod", "packages/xtrain-strategies/tests",
                                      "tests_integration/test_hangs.py", "tests_integration/test_collective_check.py",
                                      *session.posargs], {"XTRAIN_REQUIRE_HOROVOD": "1"}))
    _fail_if(failed)


@nox.session
def model_parallel(session: nox.Session) -> None:
    """The 4-process model-parallel grid on CPU (gloo): HSDP, meta-device init, checkpoints moving between mesh
    shapes and strategies, exact resume, per-block inductor compilation. Not in the default set (about 10 minutes on
    2 cores); the default ``tests`` session runs one 2x2 tensor-parallel x FSDP run, the 2-process cells of the
    model-parallel fixes and the matrix cells."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("test"), "pytest-timeout")
    session.run("pytest", "packages/xtrain-strategies/tests/test_model_parallel.py",
                "packages/xtrain-strategies/tests/test_model_parallel_fixes.py", *session.posargs,
                env={"XTRAIN_MODEL_PARALLEL_GRID": "1"})


@nox.session
def lightning_spawn(session: nox.Session) -> None:
    """The ddp_spawn Lightning-parity runs (log_dir of the caller, test() after fit in fit's version directory).
    Not in the default set (about 100 seconds on 2 cores: four spawned workers)."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("test"), "pytest-timeout")
    session.run("pytest", "-m", "lightning_spawn", "tests_integration/test_lightning_parity_ranks.py",
                *session.posargs, env={"XTRAIN_LIGHTNING_SPAWN": "1"})


@nox.session
def slurm(session: nox.Session) -> None:
    """xtrain under a real one-node SLURM cluster on this machine (tests_integration/test_slurm.py): a 2-task DDP
    job, USR1 preemption with SLURM's requeue and a bitwise-exact resume, one task killed. Not in the default set
    (about 6 minutes on 2 cores). ``tools/slurm_cluster.py`` installs slurm-wlm and munge with apt-get when they are
    missing (root), starts munged, slurmctld and slurmd in a private temporary directory and always stops them."""
    session.install("-c", TORCH, "torch==2.13.0", *_editable("test"), "pytest-timeout")
    tool = str(ROOT / "tools" / "slurm_cluster.py")
    cluster = Path(tempfile.mkdtemp(prefix="xtrain-slurm-"))
    passed = False
    try:
        session.run("python", tool, "start", str(cluster))
        session.run("pytest", "tests_integration/test_slurm.py", "-m", "slurm", "-v", "-rs", "--durations=0",
                    *session.posargs,
                    env={"XTRAIN_SLURM_TESTS": "1", "SLURM_CONF": str(cluster / "slurm.conf")})
        passed = True
    finally:
        session.run("python", tool, "stop", str(cluster))
        if passed:
            shutil.rmtree(cluster, ignore_errors=True)
        else:
            session.log(f"the cluster's config and logs are kept in {cluster}/log")
