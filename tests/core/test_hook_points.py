"""Named hook points (``core.hook_points``) and the one owner of a pass (``core.hooked_pass``):
each point read on every family equals what the Hugging Face model computes (its hidden states,
its attention weights, its own modules applied by hand), edits act and are removed, and nothing
in ``bertscope`` reaches into the model any other way."""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest
import torch

from bertscope import load_model
from bertscope.core.hook_points import (
    BLOCK_SUFFIXES,
    EMBED,
    GATED_SUFFIX,
    LN_FINAL,
    UNEMBED_IN,
    block_suffixes,
    blocks,
    every_layer,
    hook_point,
    model_family,
    state_hook,
    zero_head,
)
from bertscope.core.hooked_pass import turn
from bertscope.errors import BertScopeError

FAMILIES = ["tiny_bert_dir", "tiny_mlm_dir", "tiny_roberta_dir", "tiny_xlmr_dir", "tiny_albert_dir",
            "tiny_distilbert_dir", "tiny_electra_dir", "tiny_deberta_dir", "tiny_modernbert_dir"]
TEXT = "the bank of the river was muddy ."


def _no_hooks_left(model) -> bool:
    """None of ours (transformers keeps hooks of its own that record attentions and hidden states)."""
    return not [fn for m in model.modules() for fn in (*m._forward_hooks.values(), *m._forward_pre_hooks.values())
                if getattr(fn, "__module__", "").startswith("bertscope")]


@pytest.fixture(params=FAMILIES)
def family(request):
    return load_model(str(request.getfixturevalue(request.param)))


def test_every_point_equals_the_models_own_tensors(family):
    from transformers.activations import ACT2FN

    lm = family
    record = model_family(lm.model)
    out, cache = lm.run_with_cache(TEXT, names=lambda name: True, attentions=True, hidden_states=True, encoder_only=True)
    assert set(cache) == set(lm.hook_names) - {UNEMBED_IN}  # encoder only: the vocabulary projection never ran
    assert lm.hook_names[0] == EMBED and len(lm.hook_names) >= 1 + lm.num_layers * len(BLOCK_SUFFIXES)
    torch.testing.assert_close(cache[EMBED], out.hidden_states[0], rtol=0, atol=0)
    heads, d_head = lm.num_heads, lm.hidden_size // lm.num_heads
    last = lm.num_layers - 1
    for layer in range(lm.num_layers):
        c = {s: cache[f"blocks.{layer}.{s}"] for s in block_suffixes(record)}
        block = blocks(lm.model)[layer]
        torch.testing.assert_close(c["hook_resid_pre"], out.hidden_states[layer], rtol=0, atol=0)
        if layer < last or record.post_layernorm:
            torch.testing.assert_close(c["hook_resid_post"], out.hidden_states[layer + 1], rtol=0, atol=0)
        torch.testing.assert_close(c["attn.hook_pattern"], out.attentions[layer], rtol=0, atol=0)
        assert c["attn.hook_q"].shape == c["attn.hook_z"].shape == (1, c["hook_resid_pre"].shape[1], heads, d_head)
        # z is each head's pattern applied to its values
        z = torch.einsum("bhqk,bkhd->bqhd", c["attn.hook_pattern"], c["attn.hook_v"])
        torch.testing.assert_close(c["attn.hook_z"], z, rtol=1e-5, atol=1e-5)
        # the heads' results add up to W_O's output (plus its bias)
        o = hook_point(lm.model, f"blocks.{layer}.attn.hook_z").module
        torch.testing.assert_close(c["attn.hook_result"].sum(2) + (0 if o.bias is None else o.bias), c["hook_attn_out"],
                                   rtol=1e-5, atol=1e-5)
        mlp_out = hook_point(lm.model, f"blocks.{layer}.hook_mlp_out").module
        torch.testing.assert_close(mlp_out(c["mlp.hook_post"]), c["hook_mlp_out"], rtol=0, atol=0)
        if record.post_layernorm:  # LayerNorm(sub-block output + residual), twice
            norm = hook_point(lm.model, f"blocks.{layer}.hook_resid_mid").module
            torch.testing.assert_close(norm(c["hook_attn_out"] + c["hook_resid_pre"]), c["hook_resid_mid"],
                                       rtol=1e-5, atol=1e-5)
            after = block.get_submodule(record.mlp_norm)
            torch.testing.assert_close(after(c["hook_mlp_out"] + c["hook_resid_mid"]), c["hook_resid_post"],
                                       rtol=1e-5, atol=1e-5)
        else:  # the residual stream adds each sub-block's output; the norms sit before them
            torch.testing.assert_close(c["hook_resid_pre"] + c["hook_attn_out"], c["hook_resid_mid"], rtol=0, atol=0)
            torch.testing.assert_close(c["hook_resid_mid"] + c["hook_mlp_out"], c["hook_resid_post"], rtol=0, atol=0)
        if record.qkv:  # the fused projection's output is [query | key | value], each split into heads
            fused = hook_point(lm.model, f"blocks.{layer}.attn.hook_q").module
            read = block.get_submodule(record.attn_norm)(c["hook_resid_pre"])
            parts = torch.cat([c[f"attn.hook_{x}"].flatten(-2) for x in "qkv"], dim=-1)
            torch.testing.assert_close(parts, fused(read), rtol=0, atol=0)
        if record.gated_mlp:  # GeGLU: act(first half) * second half is what W_out reads
            act = ACT2FN[lm.config.hidden_activation]
            torch.testing.assert_close(act(c["mlp.hook_pre"]) * c[GATED_SUFFIX], c["mlp.hook_post"], rtol=1e-6, atol=1e-6)
        if lm.model_type == "albert":  # the shared layer's call index is the layer
            assert not torch.equal(c["hook_resid_post"], cache["blocks.0.hook_resid_post"]) or layer == 0
    if record.final_norm:  # the last hidden state is the encoder's output, after its final LayerNorm
        torch.testing.assert_close(cache[LN_FINAL], out.hidden_states[-1], rtol=0, atol=0)
        norm = hook_point(lm.model, LN_FINAL).module
        torch.testing.assert_close(norm(cache[f"blocks.{last}.hook_resid_post"]), cache[LN_FINAL], rtol=0, atol=0)
    assert [state_hook(lm.model, s) for s in (0, lm.num_layers)] == \
        [EMBED, LN_FINAL if record.final_norm else f"blocks.{last}.hook_resid_post"]
    assert _no_hooks_left(lm.model)


def test_identity_edits_leave_the_pass_unchanged_and_a_zeroed_head_is_the_same_at_two_points(family):
    lm = family
    own = lm.run(TEXT, encoder_only=True).last_hidden_state
    identity = {name: (lambda x, hook: x.clone()) for name in lm.hook_names
                if not name.endswith("hook_pattern") and name != UNEMBED_IN}
    torch.testing.assert_close(lm.run(TEXT, hooks=identity, encoder_only=True).last_hidden_state, own, rtol=1e-5, atol=1e-5)
    by_z = lm.run(TEXT, hooks={"blocks.1.attn.hook_z": zero_head(2)}, encoder_only=True).last_hidden_state

    def drop_result(x, hook):  # [batch, pos, head, d_model]
        x = x.clone()
        x[:, :, 2] = 0
        return x

    by_result = lm.run(TEXT, hooks={"blocks.1.attn.hook_result": drop_result}, encoder_only=True).last_hidden_state
    torch.testing.assert_close(by_z, by_result, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(by_z, own)
    assert _no_hooks_left(lm.model)


def test_a_layer_is_found_by_name_not_by_counting_passes(tiny_mlm_dir):
    """A pass that fails midway leaves no state behind: the next pass edits the right layer."""
    lm = load_model(str(tiny_mlm_dir))
    seen = []

    def boom(x, hook):
        raise RuntimeError("stop")

    with pytest.raises(RuntimeError):
        lm.run(TEXT, hooks={"blocks.0.hook_resid_post": boom})
    assert _no_hooks_left(lm.model)
    lm.run(TEXT, hooks=every_layer("hook_resid_post", lambda layer, x: seen.append(layer), lm.num_layers))
    lm.run(TEXT, hooks=every_layer("hook_resid_post", lambda layer, x: seen.append(layer), lm.num_layers))
    assert seen == [0, 1, 0, 1]


def test_the_masked_lm_head_reads_unembed_hook_in(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    out, cache = lm.run_with_cache(TEXT, [UNEMBED_IN, f"blocks.{lm.num_layers - 1}.hook_resid_post"])
    decoder = lm.model.get_output_embeddings()
    torch.testing.assert_close(decoder(cache[UNEMBED_IN]), out.logits, rtol=1e-5, atol=1e-5)


def test_bad_names_and_bad_edits_are_one_line(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    with pytest.raises(BertScopeError, match="Unknown hook point 'blocks.0.attn.hook_x'.*embed, blocks.L"):
        lm.run_with_cache(TEXT, ["blocks.0.attn.hook_x"])
    with pytest.raises(BertScopeError, match="layers 0-1"):
        lm.run(TEXT, hooks={"blocks.7.hook_resid_post": lambda x, h: None})
    with pytest.raises(BertScopeError, match="read only"):
        lm.run(TEXT, hooks={"blocks.0.attn.hook_pattern": lambda x, h: x * 0})
    with pytest.raises(BertScopeError, match="returned shape"):
        lm.run(TEXT, hooks={"blocks.0.hook_resid_post": lambda x, h: x[:, :1]})
    with pytest.raises(BertScopeError, match="empty"):
        lm.run("  ")
    assert _no_hooks_left(lm.model)


def test_hooks_and_turns_are_per_thread(tiny_mlm_dir):
    lm = load_model(str(tiny_mlm_dir))
    own = lm.run(TEXT).logits
    seen = {}
    with lm.hooks({"blocks.0.attn.hook_z": zero_head(0)}):
        with turn(lm):  # reentrant in this thread: the pass inside does not wait for itself
            mine = lm.run(TEXT).logits
        other = threading.Thread(target=lambda: seen.update(logits=lm.run(TEXT).logits))
        other.start()
        other.join()
    torch.testing.assert_close(seen["logits"], own, rtol=0, atol=0)
    assert not torch.allclose(mine, own)
    with turn(lm), pytest.raises(BertScopeError, match="eager=True"):
        lm.run(TEXT, attentions=True)  # weights inside a turn on the fast kernel: said, not deadlocked


ROOT = Path(__file__).resolve().parents[2] / "bertscope"
OWNERS = {"core/hook_points.py", "core/hooked_pass.py", "core/models.py"}
# training runs its own (LoRA, DDP-wrapped) copy of a model, not the shared one: its pass is its loop's
TRAINING_PASS = {"training/steps.py": "out = model(**feed)"}


def test_every_pass_goes_through_the_owner():
    """No module takes the guard, switches the kernel, registers a hook or calls the model itself."""
    forbidden = re.compile(r"register_forward(_pre)?_hook|register_full_backward|\.guard\b|attention_kernel\(|"
                           r"lm\.model\(|base_model\(\*\*|\bmodule\(\*\*|lm\.model\.base_model\(")
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel in OWNERS:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if forbidden.search(line) and TRAINING_PASS.get(rel, "\0") not in line:
                found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "passes or hooks outside the owner:\n" + "\n".join(found)
