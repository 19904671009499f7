"""Each layer read as the output: ``tuned`` (Belrose et al. 2023: an affine translator a hidden state, trained so
the model's own head reads each state as it reads the last; its held-out KL to the final layer, bias and
calibration beside the logit lens's), ``readings`` (one text's readings by both lenses, layer by layer), and
``shipped`` (the translators shipped for bundled-mlm and bundled-sentiment). May import: ``errors``, ``runtime``,
``sources``, ``corpora``, ``core``, ``mlm``, ``tasks``.
"""

from typing import TYPE_CHECKING

from bertscope.runtime.exports import lazy_exports

_EXPORTS = {
    "TunedLens": "lenses.tuned",
    "train_tuned_lens": "lenses.tuned",
    "load_lens": "lenses.tuned",
    "lens_quality": "lenses.tuned",
}
__all__ = list(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:  # the same names for a reader's tools (IDEs, type checkers): tools/front_doors.py
    from bertscope.lenses.tuned import TunedLens as TunedLens
    from bertscope.lenses.tuned import lens_quality as lens_quality
    from bertscope.lenses.tuned import load_lens as load_lens
    from bertscope.lenses.tuned import train_tuned_lens as train_tuned_lens
