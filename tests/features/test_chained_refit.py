"""``benchmarks/chained_refit.py`` (the writes solved on the replacement model's own inputs): at layer 0, where no
earlier layer is replaced, the plain target gives the per-layer refit's equations row for row; bad input is one
line before the model loads."""

import pytest
import torch

from benchmarks.chained_refit import layer_equations, main
from bertscope import load_model
from bertscope.core.hook_points import UNEMBED_IN
from bertscope.features.transcoder import INPUT_POINT, OUTPUT_POINT, Transcoder, TranscoderInfo
from bertscope.features.transcoder_refit import add_rows, empty_equations
from bertscope.features.transcoder_training import replaced_positions
from bertscope.interventions.importance import masked_batches


def tiny_set(lm, seed: int = 0) -> dict:
    d = lm.model.config.hidden_size
    return {layer: Transcoder(d, d, 2 * d, 4, True, TranscoderInfo(lm.name, layer, {"masked": True}), seed=seed).eval()
            for layer in range(lm.num_layers)}


def real_equations(lm, tc, layer: int, texts) -> tuple:
    """The per-layer refit's equations: layer ``layer`` read in the real model, row for row."""
    equations, seen = empty_equations(tc), {}
    for _, feed, _, _ in masked_batches(lm, texts, 32, 0):
        keep = replaced_positions(lm, feed)
        lm.run(feed, hooks={UNEMBED_IN: lambda x, hook: x[:0],
                            f"blocks.{layer}.{INPUT_POINT}": lambda x, _: seen.__setitem__("x", x[keep]),
                            f"blocks.{layer}.{OUTPUT_POINT}": lambda y, _: seen.__setitem__("y", y[keep])})
        add_rows(equations, tc, seen["x"], seen["y"])
    return equations


def test_layer_0_plain_is_the_refit_and_later_layers_read_the_replaced_input(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    texts = ["the cat sat on the mat .", "a dog ran in the park today .", "she reads a book ."] * 3
    transcoders = tiny_set(lm)
    got, rows = layer_equations(lm, transcoders, 0, texts, 10_000, "plain", 0)
    assert rows > 0
    for a, b in zip(got, real_equations(lm, transcoders[0], 0, texts)):
        torch.testing.assert_close(a, b)  # nothing before layer 0 to replace: the per-layer refit's rows
    plain, _ = layer_equations(lm, transcoders, 1, texts, 10_000, "plain", 0)
    corrected, _ = layer_equations(lm, transcoders, 1, texts, 10_000, "corrected", 0)
    real = real_equations(lm, transcoders[1], 1, texts)
    assert not torch.allclose(plain[0], real[0])  # layer 1 reads what layer 0's transcoder left
    assert torch.equal(plain[0], corrected[0]) and not torch.allclose(plain[1], corrected[1])  # same rows, new target


@pytest.mark.parametrize(("argv", "said"), [(["--tokens", "0"], "at least 1"), (["--target", "x"], "invalid choice")])
def test_bad_input_is_one_line_before_the_model_loads(argv, said, capsys, monkeypatch):
    import bertscope.core.models as models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("the model loaded before the check"))
    with pytest.raises(SystemExit) as ended:
        main(argv)
    assert ended.value.code == 2 and said in capsys.readouterr().err.strip().splitlines()[-1]
