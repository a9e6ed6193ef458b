"""What the engine integrations (hpalloc.dask, hpalloc.ray) check and set
alike: knob values and adapter lists given by the user, checked by the
library's and the activation's own parsers, and the environment variables
that carry them to worker processes.  Imports neither engine."""

import hpalloc_activate as _activation

from . import parse_knob


def canonical_knobs(knobs):
    """{knob: canonical value}, every value checked by the library; one
    ValueError naming every refused knob, before anything changes."""
    canon, errors = {}, []
    for name, value in knobs.items():
        try:
            canon[name] = parse_knob(name, value)
        except (ValueError, TypeError) as exc:
            errors.append(str(exc))
    if errors:
        raise ValueError("hpalloc: refused knob value%s: %s"
                         % ("s" if len(errors) > 1 else "", "; ".join(errors)))
    return canon


def checked_adapters(value):
    """HPALLOC_ADAPTERS' names for value (a string as that variable takes,
    or a list of names; None: its default), checked by its own parser."""
    if value is None:
        return _activation.DEFAULT_ADAPTERS
    if not isinstance(value, str):
        value = ",".join(value)
    try:
        return _activation.parse_adapters(value)
    except ValueError as exc:
        raise ValueError("hpalloc: refused adapters %r: %s" % (value, exc)) from None


def env_name(knob):
    """A knob's environment variable: HPALLOC_ and its name in capitals
    (hpalloc(7))."""
    return "HPALLOC_" + knob.upper()


def knob_environ(knobs):
    """{HPALLOC_<KNOB>: canonical value} for knobs, checked as above."""
    return {env_name(k): v for k, v in canonical_knobs(knobs).items()}
