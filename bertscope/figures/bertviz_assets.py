"""bertviz without the network: the three scripts its pages load from cdnjs, installed from npm
and served by the app itself (Streamlit static serving, ``static/`` beside ``app.py``).

bertviz 1.4 pages load require.js 2.3.6, d3 5.7.0 and jQuery 2.0.0 from cdnjs.cloudflare.com
(users have asked for an offline bertviz for years: bertviz issue #63). npm has
``requirejs@2.3.6`` and ``d3@5.7.0``; jQuery 2.0.0 was never published there, so the last 2.x,
``jquery@2.2.4``, stands in (bertviz uses only ``$`` selectors and events, present in both).
``install`` fetches them with the npm client (which checks each package's integrity) and copies
the three files into ``static/bertviz/``; ``python -m bertscope assets install`` (and
``make run`` / ``make test``) does it once.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from bertscope.errors import BertScopeError
from bertscope.runtime.atomic import write_bytes

ROOT = Path(__file__).resolve().parents[2]


def static_dir() -> Path:
    """Where the scripts go: ``static/bertviz`` beside the main script Streamlit serves it from (the
    checkout's ``app.py``, or the launch folder ``bertscope app`` keeps in the user cache)."""
    if (ROOT / "app.py").is_file() and (ROOT / "bertscope").is_dir():  # run from a checkout
        return ROOT / "static" / "bertviz"
    from bertscope.runtime.user_cache import user_cache_dir

    return user_cache_dir() / "app" / "static" / "bertviz"



URL_PATH = "app/static/bertviz"  # relative to the app's address: an iframe's srcdoc resolves it there
# npm package -> (file inside its tarball, name served); the module names bertviz's require.config uses
ASSETS = {
    "requirejs@2.3.6": ("package/require.js", "require.js"),
    "d3@5.7.0": ("package/dist/d3.min.js", "d3.min.js"),
    "jquery@2.2.4": ("package/dist/jquery.min.js", "jquery.min.js"),
}


def installed(folder: Path | None = None) -> bool:
    folder = folder or static_dir()
    return all((folder / name).is_file() and (folder / name).stat().st_size > 1000 for _, name in ASSETS.values())


def install(folder: Path | None = None, npm: str = "npm") -> Path:
    """Fetch the three packages with npm and copy the files bertviz loads into ``folder`` (once)."""
    folder = folder or static_dir()
    if installed(folder):
        return folder
    if shutil.which(npm) is None:
        raise BertScopeError("npm is missing: install it (`apt-get install npm`) to serve bertviz offline.")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([npm, "pack", *ASSETS, "--pack-destination", tmp], capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise BertScopeError(f"npm could not fetch bertviz's scripts: {last}")
        for package, (inside, name) in ASSETS.items():
            stem = package.replace("@", "-")
            with tarfile.open(Path(tmp) / f"{stem}.tgz") as tar:
                member = tar.getmember(inside)  # one named file: no path from the archive is trusted
                data = tar.extractfile(member).read()
            write_bytes(folder / name, data)
    return folder
