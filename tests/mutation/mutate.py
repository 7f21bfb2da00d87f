"""Mutation testing of devmm: universalmutator on the core's C files, cosmic-ray on the Python
package, a seeded sample of each file's mutants run against the fast tests that cover that file.

    mutate.py [--sample N] [--seed S] [--minutes M] [--only PATH]... [--target-c P]
              [--target-py P] [--report FILE]

Everything happens in a scratch copy of the working tree (build-mutate/src, built in
build-mutate/build), never in the checkout. For each file listed in tests/mutation/targets.txt
the tool makes every mutant, shuffles them with the seed, and takes them in that order until N
were tested (or the budget of M minutes is spent). A mutant is

  invalid      it does not compile (C) or byte-compile (Python): never tested, never counted;
  equivalent   its object file is identical to the original's (C: trivial compiler
               equivalence), or it is listed with a reason in tests/mutation/equivalent.txt:
               never tested, never counted;
  killed       the file's tests fail (or time out: listed as such);
  survived     the file's tests pass.

The score of a file is killed / (killed + survived). The exit status is 1 when the C files'
overall score is below --target-c or the Python files' below --target-py (in percent), 2 when
the tests fail on the unmutated code (the selection is broken: nothing can be measured).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import filecmp
import glob
import hashlib
import json
import os
import py_compile
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
WORK = os.path.join(ROOT, "build-mutate")
SRC = os.path.join(WORK, "src")
BUILD = os.path.join(WORK, "build")
BIN = os.path.dirname(sys.executable)  # the venv's: mutate, cosmic-ray


# ----------------------------------------------------------------------------- data files

@dataclasses.dataclass
class Target:
    path: str
    tests: list[str]


def read_targets(path: str) -> list[Target]:
    """tests/mutation/targets.txt: `file test...` per line, # comments."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].split()
            if not line:
                continue
            if len(line) < 2:
                sys.exit(f"{path}:{n}: '{line[0]}' has no tests")
            for t in line[1:]:
                if t.split(":", 1)[0] not in ("core", "py", "legacy", "doc"):
                    sys.exit(f"{path}:{n}: unknown test '{t}' (core:SUITE, py:FILE, "
                             f"legacy:FILE or doc:MODULE)")
            out.append(Target(line[0], line[1:]))
    return out


def read_equivalent(path: str) -> dict[tuple[str, str, str], list]:
    """tests/mutation/equivalent.txt: blocks of `file:`, `was:`, `now:`, `why:` lines, and
    `after:` (the line before the change) where the changed line occurs more than once."""
    out, cur = {}, {}

    def flush():
        if cur:
            missing = {"file", "was", "now", "why"} - cur.keys()
            if missing:
                sys.exit(f"{path}: an entry lacks {', '.join(sorted(missing))}: {cur}")
            out.setdefault((cur["file"], cur["was"], cur["now"]), []).append(cur.get("after"))
            cur.clear()

    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            if not line.strip():
                flush()
                continue
            key, _, value = line.partition(":")
            if key not in ("file", "was", "now", "why", "after"):
                sys.exit(f"{path}: unexpected line {line!r}")
            cur[key] = value.strip()
    flush()
    return out


# ----------------------------------------------------------------------------- scratch tree

def run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def sync_tree() -> None:
    """Copies the working tree's files into SRC, rewriting only what changed (ninja then
    rebuilds only that)."""
    files = run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                check=True).stdout.split("\0")
    for rel in files:
        if not rel or rel == ".venv":
            continue
        src, dst = os.path.join(ROOT, rel), os.path.join(SRC, rel)
        if os.path.islink(src) or not os.path.isfile(src):
            continue
        if os.path.exists(dst) and filecmp.cmp(src, dst, shallow=False):
            continue
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst)
    venv = os.path.join(SRC, ".venv")
    if not os.path.lexists(venv):
        os.symlink(os.path.realpath(os.path.join(ROOT, ".venv")), venv)


def build() -> bool:
    return run(["ninja", "-C", BUILD]).returncode == 0


def setup() -> None:
    os.makedirs(SRC, exist_ok=True)
    sync_tree()
    if not os.path.exists(os.path.join(BUILD, "build.ninja")):
        # no debug info, so that an unchanged function compiles to identical bytes (TCE)
        # every plugin as in the main build (the tests check what was built)
        r = run(["meson", "setup", BUILD, SRC, "-Ddebug=false", "-Doptimization=2"])
        if r.returncode:
            sys.exit(f"meson setup failed:\n{r.stdout}{r.stderr}")
    r = run(["ninja", "-C", BUILD])
    if r.returncode:
        sys.exit(f"the scratch build fails without any mutation:\n{r.stdout[-3000:]}")


# ----------------------------------------------------------------------------- tests

class Suite:
    """The commands of one file's tests, with the environments Meson gives them."""

    def __init__(self, tests: list[str], meson_tests: dict) -> None:
        self.cmds = []
        py = [t.split(":", 1)[1] for t in tests if t.startswith("py:")]
        legacy = [t.split(":", 1)[1] for t in tests if t.startswith("legacy:")]
        doc = [t.split(":", 1)[1] for t in tests if t.startswith("doc:")]
        for t in tests:
            if t.startswith("core:"):
                m = meson_tests[t.split(":", 1)[1]]
                self.cmds.append((t, m["cmd"], m["env"]))

        def pytest(name, test, args):
            m = meson_tests[test]
            cmd = [m["cmd"][0], "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"] + args
            self.cmds.append((name, cmd, m["env"]))

        # one process per file, in the listed order: list the quick ones first (-x stops a
        # file at its first failure, and the first failing file ends the run)
        for f in py:
            pytest("py:" + f, "python", [os.path.join(SRC, "tests", "python", f)])
        for f in doc:
            pytest("doc:" + f, "doctests", ["--doctest-modules", os.path.join(SRC, f)])
        for f in legacy:
            pytest("legacy:" + f, "python-legacy", [os.path.join(SRC, "tests", "python_legacy", f)])

    def run(self, timeout: float, times: dict | None = None) -> tuple[str, str]:
        """('pass', '') or ('fail'|'timeout', which command). With times (the baseline), each
        command runs once and its duration is recorded there."""
        for name, cmd, env in self.cmds:
            if times is not None:
                if name in times:
                    continue
                times[name] = time.monotonic()
            full = dict(os.environ, **env)
            p = subprocess.Popen(cmd, env=full, cwd=BUILD, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                rc = p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                return "timeout", name
            if times is not None:
                times[name] = time.monotonic() - times[name]
            if rc != 0:
                return "fail", name
        return "pass", ""

    def seconds(self, times: dict) -> float:
        return sum(times[name] for name, _, _ in self.cmds)


# ----------------------------------------------------------------------------- mutants

@dataclasses.dataclass
class Mutant:
    make: object   # writes the mutated file over the scratch copy of the source
    line: int = 0  # first changed line (1-based)
    was: str = ""  # the original line(s), stripped, joined with " \\n "
    now: str = ""  # the mutated line(s)
    after: str = ""  # the line before the change, stripped

    def apply(self, src: str, original: list[str]) -> None:
        self.make()
        mutated = open(src).read().splitlines()
        sm = difflib.SequenceMatcher(a=original, b=mutated, autojunk=False)
        for tag, i1, i2, j1, j2 in sm.get_opcodes():
            if tag == "insert" and i1 > 0:  # name an insertion by the line it follows
                i1, j1 = i1 - 1, j1 - 1
            if tag != "equal":
                self.line = i1 + 1
                self.after = original[i1 - 1].strip() if i1 > 0 else ""
                self.was = " \\n ".join(x.strip() for x in original[i1:i2])
                self.now = " \\n ".join(x.strip() for x in mutated[j1:j2])
                return


def c_mutants(rel: str, tmp: str) -> list[Mutant]:
    """Every mutant universalmutator makes of the C file (its C rules), unchecked."""
    out = os.path.join(tmp, "mutants")
    os.makedirs(out)
    src = os.path.join(SRC, rel)
    r = run([os.path.join(BIN, "mutate"), src, "c", "--noCheck", "--mutantDir", out])
    if r.returncode:
        sys.exit(f"universalmutator failed on {rel}:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    stem = os.path.splitext(os.path.basename(rel))[0]
    found = glob.glob(os.path.join(out, f"{stem}.mutant.*.c"))
    found.sort(key=lambda p: int(p.rsplit(".", 2)[-2]))
    return [Mutant(make=lambda p=p: shutil.copy(p, src)) for p in found]


def py_mutants(rel: str, tmp: str) -> list[Mutant]:
    """Every mutant cosmic-ray makes of the Python module (all its core operators); each is
    applied by `cosmic-ray apply` when it is drawn."""
    cfg = os.path.join(tmp, "cosmic-ray.toml")
    with open(cfg, "w") as f:
        f.write(f'[cosmic-ray]\nmodule-path = "{rel}"\ntimeout = 60.0\nexcluded-modules = []\n'
                f'test-command = "true"\n\n[cosmic-ray.distributor]\nname = "local"\n')
    session = os.path.join(tmp, "session.sqlite")
    cr = os.path.join(BIN, "cosmic-ray")
    r = run([cr, "init", cfg, session], cwd=SRC)
    if r.returncode:
        sys.exit(f"cosmic-ray init failed on {rel}:\n{r.stderr[-2000:]}")
    jobs = [json.loads(line)[0]["mutations"][0]
            for line in run([cr, "dump", session], cwd=SRC, check=True).stdout.splitlines()]
    jobs.sort(key=lambda m: (m["start_pos"], m["operator_name"], m["occurrence"]))

    def make(m):
        r = run([cr, "apply", rel, m["operator_name"], str(m["occurrence"])], cwd=SRC)
        if r.returncode:
            sys.exit(f"cosmic-ray apply {rel} {m['operator_name']} {m['occurrence']} failed:\n"
                     f"{r.stderr[-2000:]}")

    return [Mutant(make=lambda m=m: make(m)) for m in jobs]


def change(was: str, now: str, context: int = 24) -> str:
    """The changed part of a line with a little context: `...abc[old -> new]def...`."""
    p = 0
    while p < min(len(was), len(now)) and was[p] == now[p]:
        p += 1
    q = 0
    while q < min(len(was), len(now)) - p and was[-1 - q] == now[-1 - q]:
        q += 1
    head = was[max(0, p - context):p]
    tail = was[len(was) - q:len(was) - q + context]
    return (f"{'...' if p > context else ''}{head}[{was[p:len(was) - q]} -> "
            f"{now[p:len(now) - q]}]{tail}{'...' if q > context else ''}")


def object_of(rel: str) -> str | None:
    """The object file the build makes of a C source (for trivial compiler equivalence)."""
    name = os.path.basename(rel)
    hits = glob.glob(os.path.join(BUILD, os.path.dirname(rel), "*.p", name + ".o"))
    return hits[0] if len(hits) == 1 else None


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ----------------------------------------------------------------------------- measurement

@dataclasses.dataclass
class Result:
    path: str
    generated: int = 0
    killed: int = 0
    timeouts: int = 0
    invalid: int = 0
    tce: int = 0
    reviewed: int = 0
    survivors: list = dataclasses.field(default_factory=list)
    complete: bool = True
    seconds: float = 0.0

    @property
    def tested(self) -> int:
        return self.killed + len(self.survivors)

    @property
    def score(self) -> float | None:
        return 100.0 * self.killed / self.tested if self.tested else None


def measure(t: Target, suite: Suite, equivalent: dict, sample: int, seed: int,
            deadline: float, timeout: float) -> Result:
    res = Result(t.path)
    start = time.monotonic()
    src = os.path.join(SRC, t.path)
    pristine = open(src, "rb").read()
    is_c = t.path.endswith(".c")
    with tempfile.TemporaryDirectory(dir=WORK) as tmp:
        mutants = c_mutants(t.path, tmp) if is_c else py_mutants(t.path, tmp)
        res.generated = len(mutants)
        random.Random(f"{seed}:{t.path}").shuffle(mutants)
        obj = object_of(t.path) if is_c else None
        base = digest(obj) if obj else None
        original = pristine.decode().splitlines()
        try:
            for mu in mutants:
                if res.tested >= sample:
                    break
                if time.monotonic() > deadline:
                    res.complete = False
                    break
                with open(src, "wb") as f:
                    f.write(pristine)
                mu.apply(src, original)
                afters = equivalent.get((t.path, mu.was, mu.now), [])
                if None in afters or mu.after in afters:
                    res.reviewed += 1
                    continue
                if is_c:
                    if not build():
                        res.invalid += 1
                        continue
                    if obj and digest(obj) == base:
                        res.tce += 1
                        continue
                else:
                    try:
                        py_compile.compile(src, cfile=os.path.join(tmp, "c.pyc"), doraise=True)
                    except py_compile.PyCompileError:
                        res.invalid += 1
                        continue
                verdict, where = suite.run(timeout)
                if verdict == "pass":
                    res.survivors.append(mu)
                else:
                    res.killed += 1
                    res.timeouts += verdict == "timeout"
                print(f"  {t.path}:{mu.line}: {verdict:7} {change(mu.was, mu.now)}"
                      f"{'  (' + where + ')' if where else ''}", flush=True)
        finally:
            with open(src, "wb") as f:
                f.write(pristine)
            if is_c:
                build()
    res.seconds = time.monotonic() - start
    return res


def report(results: list[Result], args, runtime: float) -> str:
    lines = [f"mutation testing: seed {args.seed}, up to {args.sample} tested mutants per file, "
             f"{runtime / 60:.1f} min", "",
             "| file | generated | tested | killed | survived | score | invalid | "
             "equivalent (TCE / reviewed) | timeouts | time |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        score = f"{r.score:.0f}%" if r.score is not None else "-"
        lines.append(f"| {r.path}{'' if r.complete else ' (budget spent)'} | {r.generated} | "
                     f"{r.tested} | {r.killed} | {len(r.survivors)} | {score} | {r.invalid} | "
                     f"{r.tce} / {r.reviewed} | {r.timeouts} | {r.seconds:.0f} s |")
    lines.append("")
    for kind, name in ((".c", "C (core/)"), (".py", "Python (python/devmm/)")):
        rs = [r for r in results if r.path.endswith(kind)]
        k, n = sum(r.killed for r in rs), sum(r.tested for r in rs)
        if n:
            lines.append(f"{name}: {k} of {n} killed, {100.0 * k / n:.1f}%")
    survivors = [(r.path, s) for r in results for s in r.survivors]
    if survivors:
        lines += ["", "Survivors (not killed by the file's tests; to be killed by a new test or "
                  "reviewed into tests/mutation/equivalent.txt):"]
        for path, s in survivors:
            lines.append(f"- {path}:{s.line}: {change(s.was, s.now)}\n  - was: `{s.was}`\n"
                         f"  - now: `{s.now}`")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sample", type=int, default=20, help="tested mutants per file")
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--minutes", type=float, default=25.0,
                    help="time budget for the mutants (after the scratch build and baseline)")
    ap.add_argument("--only", action="append", default=[], help="just these files")
    ap.add_argument("--target-c", type=float, default=0.0)
    ap.add_argument("--target-py", type=float, default=0.0)
    ap.add_argument("--report", default=os.path.join(WORK, "report.md"))
    ap.add_argument("--targets", default=os.path.join(HERE, "targets.txt"))
    ap.add_argument("--equivalent", default=os.path.join(HERE, "equivalent.txt"))
    args = ap.parse_args()
    t0 = time.monotonic()
    targets = read_targets(args.targets)
    if args.only:
        targets = [t for t in targets if t.path in args.only]
        if not targets:
            sys.exit(f"none of {args.only} is in {args.targets}")
    equivalent = read_equivalent(args.equivalent)
    print(f"mutate: {len(targets)} files, scratch tree {SRC}", flush=True)
    setup()
    meson_tests = {m["name"]: m for m in json.loads(
        run(["meson", "introspect", BUILD, "--tests"], check=True).stdout)}
    # the unmutated code must pass every selection, and how long it takes sets the timeout
    suites, times = {}, {}
    for t in targets:
        if not os.path.exists(os.path.join(SRC, t.path)):
            sys.exit(f"{args.targets}: {t.path} does not exist")
        suites[t.path] = Suite(t.tests, meson_tests)
        verdict, where = suites[t.path].run(600, times)
        if verdict != "pass":
            print(f"mutate: the tests of {t.path} fail without any mutation ({where})")
            return 2
    slowest = max(suites[t.path].seconds(times) for t in targets)
    timeout = 10 + 3 * slowest
    deadline = time.monotonic() + args.minutes * 60  # the budget is for the mutants
    print(f"mutate: baseline passes (slowest selection {slowest:.1f} s; timeout {timeout:.0f} s)",
          flush=True)
    results = []
    for i, t in enumerate(targets):  # each file gets an equal share of what is left
        share = time.monotonic() + (deadline - time.monotonic()) / (len(targets) - i)
        results.append(measure(t, suites[t.path], equivalent, args.sample, args.seed, share,
                               timeout))
    text = report(results, args, time.monotonic() - t0)
    with open(args.report, "w") as f:
        f.write(text)
    print("\n" + text + f"(report: {args.report})")
    status = 0
    for kind, target in ((".c", args.target_c), (".py", args.target_py)):
        rs = [r for r in results if r.path.endswith(kind)]
        k, n = sum(r.killed for r in rs), sum(r.tested for r in rs)
        if n and 100.0 * k / n < target:
            print(f"FAIL: the {kind} files' score {100.0 * k / n:.1f}% is below {target}%")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
