"""The old name of ``bertscope.outputs`` ("heads" now names attention heads only): code written
against ``bertscope.heads.fill_mask`` and its neighbours still imports. May import: ``outputs``.
"""

import importlib
import sys

from bertscope.outputs import *  # noqa: F401,F403
from bertscope.outputs import __all__  # noqa: F401

for _name in ("fill_mask", "logit_lens", "masking", "mlm_recipe", "nsp"):
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"bertscope.outputs.{_name}")
