"""bench/first_touch.py as root (issue 35): its rows say what they measured
(4 KiB faults on 4 KiB pages, hugetlb ones on pool pages), and the 2 MiB
pool it reserves (one per hugetlb process, and one kept across processes)
is as before after a run, after a process that fails on a pool, and after
SIGTERM while a process runs on it."""

import os
import signal
import subprocess
import sys

from conftest import python_env
from test_bench_restore import left_in_session, pool_2m, pools_said, root, wait_for  # noqa: F401

SRCDIR = os.environ.get("abs_top_srcdir",
                        os.path.join(os.path.dirname(__file__), "..", ".."))
BENCH = os.path.join(SRCDIR, "bench", "first_touch.py")
PROGRAM = os.path.join(os.environ.get("abs_top_builddir", os.path.join(SRCDIR)),
                       "bench", "first_touch")


def bench(args):
    return [sys.executable, BENCH] + args


def rows(out):
    """{(label, MiB): cells} of the table first_touch.py printed."""
    table = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 8 and cells[1].isdigit():
            table[(cells[0], int(cells[1]))] = cells
    return table


def fake_program(tmp_path, hugetlb):
    """A stand-in for bench/first_touch whose hugetlb run does hugetlb
    (a shell command), the others report a touch at once."""
    path = tmp_path / "fake_first_touch"
    path.write_text('#!/bin/sh\nif [ "$1" = hugetlb ]; then %s; fi\necho "0.01 5"\n' % hugetlb)
    path.chmod(0o755)
    return str(path)


def test_rows_measure_what_they_say(root):
    before = pool_2m()
    proc = subprocess.run(bench([PROGRAM, "--sizes", "8", "--rounds", "2", "--gap", "0"]),
                          env=python_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert pool_2m() == before, pools_said()
    table = rows(proc.stdout)
    labels = {label for label, _ in table}
    assert len(labels) == 4, proc.stdout
    faults = {label.split(" ")[0] + (" kept" if "kept" in label else ""): float(cells[5])
              for (label, _), cells in table.items()}
    # 8 MiB on 4 KiB pages: a fault per page; on 2 MiB pages a few
    assert faults["4"] >= 2048 and faults["hugetlb"] < 64 and faults["hugetlb kept"] < 64, faults


def test_failing_on_a_pool_gives_it_back(root, tmp_path):
    before = pool_2m()
    proc = subprocess.run(bench([fake_program(tmp_path, "echo no pages >&2; exit 3"),
                                 "--sizes", "8", "--rounds", "1", "--gap", "0"]),
                          env=python_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "hugetlb 8 MiB failed: no pages" in proc.stderr, proc.stderr
    assert pool_2m() == before, pools_said()


def test_sigterm_on_a_pool_gives_it_back(root, tmp_path):
    before = pool_2m()
    proc = subprocess.Popen(bench([fake_program(tmp_path, "exec sleep 60"),
                                   "--sizes", "8", "--rounds", "1", "--gap", "0"]),
                            env=python_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        reserved = wait_for(lambda: pool_2m() > before, 60, proc)
        assert reserved, "no pool was reserved: %s" % proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, err
    assert pool_2m() == before, pools_said()
    assert left_in_session(proc.pid) == [], "the bench left its process running"
