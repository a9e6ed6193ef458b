"""The benches' processes and signals (bench/numpy_bench.py,
bench/first_touch.py): a process started and ended so that an interrupt
never leaves it running, and Ctrl-C, SIGTERM and SIGHUP held off while a
hugetlb pool changes size.  A bench that reserves pools must give back
exactly what it added, also when interrupted (tests/python/
test_bench_restore.py, test_bench_first_touch.py)."""

import contextlib
import os
import signal
import subprocess


def raise_interrupt(signum, frame):
    raise KeyboardInterrupt("signal %d" % signum)


INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_held(block=True):
    """Ctrl-C, SIGTERM and SIGHUP held off while a pool changes size, a
    process starts or the bench's processes are being killed, then acted on
    as they would have been: the kernel stops adding pages at a pending
    signal, and a KeyboardInterrupt raised midway would leave pages added
    that pools_added does not count, or a process the bench does not hold.
    Blocked in this thread (the kernel's loop runs on through them) and
    caught by a handler that only notes them (a signal sent to the process
    may reach another thread, whose handler Python runs here).  Not
    blocked with block=False, around a process's start: it would inherit
    the mask, and neither Ctrl-C nor end_process's SIGTERM would reach it."""
    held = []
    old = {s: signal.signal(s, lambda signum, frame: held.append(signum)) for s in INTERRUPTS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, INTERRUPTS if block else ())
    try:
        yield
    finally:
        while True:  # taken while blocked: no handler runs at some later moment
            info = signal.sigtimedwait(INTERRUPTS, 0)
            if info is None:
                break
            held.append(info.si_signo)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for s, handler in old.items():
            signal.signal(s, handler)
        if held:
            handler = old[held[0]]
            if callable(handler):
                handler(held[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), held[0])


def run_process(argv, env, timeout, preexec_fn=None):
    """(stdout, stderr, exit status) of argv.  Whatever ends the wait (a
    timeout, Ctrl-C, SIGTERM) ends the process and waits until it is gone:
    it may hold pool pages, which restore() can only give back once they
    are freed.  (It stays in the bench's process group, where a terminal's
    Ctrl-C reaches it and tests/run-test finds it if the bench is killed.)
    An interrupt while it starts waits until the bench holds it (proc): one
    raised inside Popen, after the fork, left it running on, orphaned,
    with the pool pages it took (test_bench_restore)."""
    proc = None
    try:
        with signals_held(block=False):
            proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, preexec_fn=preexec_fn)
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        if proc is not None:
            end_process(proc)
        raise
    return stdout, stderr, proc.returncode


def end_process(proc):
    """SIGTERM (`hpctl run` passes it on to the program it runs), then
    SIGKILL if that did not do within 10 s; waits for the end either way."""
    with signals_held():  # a second Ctrl-C must not cut this short
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
