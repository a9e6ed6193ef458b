"""hpalloc's counters for a process that runs a prometheus_client registry.

    import hpalloc.prometheus
    hpalloc.prometheus.register()                  # this process, live
    hpalloc.prometheus.register(processes="all")   # every process publishing
                                                   # in the control directory
    hpalloc.prometheus.text()                      # the text, without prometheus_client

The metrics are the library's (hp_proc_prometheus, the formatter behind
`hpctl metrics`): the same names, labels (pid, comm, ...) and values, never
written a second time here.  The collector hands that text to
prometheus_client's own parser and yields the families it returns, so the
registry exposes them like its own.  Each scrape reads the counters anew.

processes="self" (the default) reads this process's counters live, whether
or not it publishes an entry; "all" reads the entries every process using
hpalloc publishes (this user's control directory), as `hpctl metrics` does.
Do not use "all" in several processes scraped by one Prometheus: each would
export every process.
"""

from . import _hpalloc

__all__ = ["HpallocCollector", "register", "text"]

_SCOPES = ("self", "all")


def _scope(processes):
    if processes not in _SCOPES:
        raise ValueError("processes must be %s, not %r" % (" or ".join(
            repr(s) for s in _SCOPES), processes))
    return processes


def text(processes="self"):
    """The metrics in Prometheus' text exposition format (0.0.4)."""
    return _hpalloc.prometheus(_scope(processes) == "all")


class HpallocCollector:
    """A prometheus_client collector of hpalloc's metrics (see the module)."""

    def __init__(self, processes="self"):
        self.processes = _scope(processes)

    def collect(self):
        from prometheus_client.parser import text_string_to_metric_families
        return text_string_to_metric_families(text(self.processes))


def register(registry=None, processes="self"):
    """Add an HpallocCollector to registry (prometheus_client.REGISTRY by
    default) and return it (registry.unregister(collector) takes it off)."""
    if registry is None:
        from prometheus_client import REGISTRY as registry
    collector = HpallocCollector(processes)
    registry.register(collector)
    return collector
