"""What a long job will cost, said before its button is pressed: measured on this server, never guessed. Each job of
a kind (a page's store) that runs to its end records its seconds per unit of what its cost grows with (sentences,
word pieces, pairs) for its model; the next ask of that kind and model scales the latest rate to its own size.
Kept in the user cache (``app/job-rates.json``), so a restart keeps what was measured. Before the first run of a
kind there is no figure: the page says the bar will tell once it runs."""

from __future__ import annotations

import json
import threading
import time

from bertscope.runtime.atomic import write_text
from bertscope.runtime.user_cache import user_cache_dir

_LOCK = threading.Lock()


def _file():
    return user_cache_dir() / "app" / "job-rates.json"


def _read() -> dict:
    try:
        found = json.loads(_file().read_text())
        return found if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def record(kind: str, model: str, units: int, seconds: float) -> None:
    """A job of ``kind`` on ``model`` ran ``units`` in ``seconds`` (only whole runs are recorded)."""
    if units <= 0 or seconds <= 0:
        return
    with _LOCK:
        rates = _read()
        rates[f"{kind}|{model}"] = {"seconds_per_unit": seconds / units, "units": units, "seconds": seconds,
                                    "when": time.time()}
        write_text(_file(), json.dumps(rates, indent=1))


def expected(kind: str, model: str, units: int, unit: str) -> str:
    """One clause for a wait text: the time a job of ``units`` should take here, from the last whole run of the same
    kind and model on this server, or that none has run yet."""
    rate = _read().get(f"{kind}|{model}")
    if not rate:
        return "not measured on this server yet: the bar says the time left once it runs"
    seconds = rate["seconds_per_unit"] * units
    return (f"about {_duration(seconds)} here (the last such run took {_duration(rate['seconds'])} for "
            f"{rate['units']:,} {unit})")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min" if seconds < 5400 else \
        f"{seconds / 3600:.1f} h"
