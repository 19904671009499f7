"""The checkout's root: ``pytest --doctest-modules bertscope`` (a library user's habit) collects every module of the
package. The one module that needs an extra, ``interop/tl_adapters.py`` (TransformerLens's entry point: it imports
TransformerLens), is left out where TransformerLens is not installed."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("transformer_lens") else ["bertscope/interop/tl_adapters.py"]
