"""Every copy-paste example of docs/dask.md, docs/ray.md and
docs/monitoring.md runs as written, in a venv holding only what that page
says to install (issue 46).

Each fenced block of a page carries a marker, an HTML comment on the line
before it (invisible where the page is rendered):

    <!-- doc-test: install -->          the page's install commands (bash),
                                        run first in an empty directory
                                        whose dist/ holds hpalloc's wheel;
                                        they make ./venv
    <!-- doc-test: python -->           `venv/bin/python -c BLOCK` (a fresh
                                        session, as pasted)
    <!-- doc-test: sh -->               bash, the venv activated
    <!-- doc-test: sh background -->    the same, left running while the
                                        page's next blocks run (a server); it
                                        must still run at the page's end,
                                        then is stopped
    <!-- doc-test: no: WHY -->          not run, and why (output, a
                                        configuration file, a change to the
                                        machine, a cluster it needs)

A block without a marker fails the test: nothing is left out unsaid.  The
blocks run in the page's order, in that directory, with a deadline each;
a non-zero exit fails with what it printed.  Runs in make check-ray-venv's
lane (PyPI's packages; pip's cache makes the venvs quick the second time).
"""

import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from hp_pytest_automake import need

need("ray")                  # this lane's: PyPI reachable, the wheel built
need("prometheus_client")

SRCDIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PAGES = ("docs/dask.md", "docs/ray.md", "docs/monitoring.md")
MARK = re.compile(r"^<!-- doc-test: (install|python|sh background|sh|no: .+) -->$")
INSTALL_DEADLINE = 900
BLOCK_DEADLINE = 300
BACKGROUND_START = 3         # seconds a server block gets before the next block


def blocks(page):
    """[(marker or None, lang, code, line)] of the page's fenced blocks."""
    with open(os.path.join(SRCDIR, page), encoding="utf-8") as f:
        lines = f.read().splitlines()
    found, marker, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        m = MARK.match(line.strip())
        if m:
            marker = m.group(1)
        elif line.startswith("```"):
            start, lang, body = i + 1, line[3:].strip(), []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            found.append((marker, lang, "\n".join(body) + "\n", start))
            marker = None
        elif line.strip():
            marker = None    # a marker stands right before its block
        i += 1
    return found


def wheel():
    builddir = os.environ.get("abs_top_builddir") or os.path.join(SRCDIR, "build")
    found = sorted(glob.glob(os.path.join(builddir, "wheelhouse", "hpalloc-*.whl")))
    if not found:
        pytest.fail("no hpalloc wheel in %s/wheelhouse (make check-ray-venv builds it)"
                    % builddir)
    return found[-1]


def clean_environ(work, venv=True):
    """A user's environment: none of the test harness's hpalloc, library
    or Python paths (the venv's hpalloc must serve), the test's private
    control directory kept; python3 on PATH is the interpreter the venvs
    are made from."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HPALLOC_", "PYTHON", "VIRTUAL_ENV"))
           and k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    if os.environ.get("HPALLOC_CONTROL_DIR"):
        env["HPALLOC_CONTROL_DIR"] = os.environ["HPALLOC_CONTROL_DIR"]
    env["RAY_DISABLE_USAGE_STATS"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    path = [os.path.join(work, ".python3")]
    if venv:
        path.insert(0, os.path.join(work, "venv", "bin"))
        env["VIRTUAL_ENV"] = os.path.join(work, "venv")
    env["PATH"] = os.pathsep.join(path + [env.get("PATH", "/usr/bin:/bin")])
    return env


def run(page, line, argv, work, env, deadline):
    try:
        proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True,
                              timeout=deadline, start_new_session=True)
    except subprocess.TimeoutExpired as exc:
        said = exc.stdout or ""
        pytest.fail("%s:%d: not done within %d s: %s" % (
            page, line, deadline, (said.decode(errors="replace") if isinstance(said, bytes)
                                   else said)[-3000:]))
    if proc.returncode != 0:
        pytest.fail("%s:%d: exit %d\n%s\n%s" % (page, line, proc.returncode,
                                                 proc.stdout[-3000:], proc.stderr[-6000:]))
    return proc.stdout


def stop(proc):
    for sig, wait in ((signal.SIGINT, 15), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_marked(page):
    unmarked = ["%s:%d (```%s)" % (page, line, lang)
                for marker, lang, _, line in blocks(page) if marker is None]
    assert not unmarked, "blocks without a <!-- doc-test: ... --> marker: %s" % unmarked
    kinds = [marker for marker, _, _, _ in blocks(page)]
    assert kinds.count("install") == 1 and kinds[0] == "install", kinds


@pytest.mark.parametrize("page", PAGES)
def test_examples_run_as_written(page, tmp_path):
    work = str(tmp_path)
    os.mkdir(os.path.join(work, "dist"))
    shutil.copy(wheel(), os.path.join(work, "dist"))
    shim = os.path.join(work, ".python3")
    os.mkdir(shim)
    os.symlink(getattr(sys, "_base_executable", sys.executable), os.path.join(shim, "python3"))
    background, ran = [], []
    try:
        for marker, lang, code, line in blocks(page):
            if marker.startswith("no:"):
                continue
            started = time.monotonic()
            if marker == "install":
                run(page, line, ["bash", "-euo", "pipefail", "-c", code], work,
                    clean_environ(work, venv=False), INSTALL_DEADLINE)
            elif marker == "python":
                assert lang == "python", (page, line, lang)
                run(page, line, [os.path.join(work, "venv", "bin", "python"), "-c", code],
                    work, clean_environ(work), BLOCK_DEADLINE)
            elif marker == "sh":
                run(page, line, ["bash", "-euo", "pipefail", "-c", code], work,
                    clean_environ(work), BLOCK_DEADLINE)
            else:   # sh background
                log = open(os.path.join(work, "background-%d.log" % line), "w")
                background.append((line, log, subprocess.Popen(
                    ["bash", "-euo", "pipefail", "-c", code], cwd=work, env=clean_environ(work),
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)))
                time.sleep(BACKGROUND_START)
            ran.append("%s:%d %s %.0f s" % (page, line, marker, time.monotonic() - started))
        for line, log, proc in background:
            if proc.poll() is not None:
                log.flush()
                with open(log.name) as f:
                    pytest.fail("%s:%d: the server ended (exit %d) before the page did:\n%s"
                                % (page, line, proc.returncode, f.read()[-4000:]))
    finally:
        for _, log, proc in background:
            stop(proc)
            log.close()
    print("\n".join(ran))
    assert ran, "%s: nothing ran" % page
