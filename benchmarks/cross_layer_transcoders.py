"""Cross-layer transcoders against per-layer ones, trained alike: does letting each feature write to every later
feed-forward output bring the replacement model nearer the real one?

    python benchmarks/cross_layer_transcoders.py [--tokens 400000] [--epochs 3] [--k 48] [--kinds cross,per-layer]
                                                 [--held-out 300] [--device auto] [--json]

A cross-layer transcoder (Ameisen et al. 2025, "Circuit tracing"; circuit-tracer's ``CrossLayerTranscoder``) has
one encoder a layer, reading that layer's feed-forward input, and a decoder from each layer's features to that
layer's and every later layer's feed-forward output:

    z_l  = TopK(ReLU(x̃_l W_enc,l + b_enc,l))            # x̃_l: layer l's input, each dimension standardised
    ŷ_m  = Σ_{l ≤ m} z_l W_dec,l→m + x̃_m W_skip,mᵀ + b_dec,m

trained on Σ_m ‖y_m − ŷ_m‖² / Var(y_m) with AuxK on each layer's own decoder (``features.trainer``'s recipe
otherwise: Adam at 2e-4 / √(d_sae / 2¹⁴), the rate falling over the last fifth, gradients clipped at 1). The
per-layer kind is the same model with only the l → l decoders: the same tokens (bundled-mlm's feed-forward inputs
and outputs over the mixture's training side, read through BERT's seeded corruption), steps, k, width and
initialisation, so the difference between the two rows is the cross-layer decoders alone. Both are scored on the
mixture's held-out side as ``score-transcoders`` scores a set: each layer's FVE, and the replacement model (every
feed-forward replaced, each layer's features chosen on the replacement run's own input) against the real one at
BERT's masked positions. A short run (minutes), for the comparison: the library's sets train 10x longer.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

BATCH = 512
EXPANSION = 8


class Coder(torch.nn.Module):
    """Per-layer encoders and the decoders of ``pairs`` (l, m): layer l's features into layer m's output."""

    def __init__(self, layers: int, d: int, k: int, cross: bool, shift, scale, y_mean) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.k, self.layers, self.d_sae = k, layers, EXPANSION * d
        self.register_buffer("shift", shift)  # [L, d]: the inputs' standardisation
        self.register_buffer("scale", scale)  # [L, d]
        enc = torch.randn(layers, d, self.d_sae, generator=g)
        self.W_enc = torch.nn.Parameter(enc / enc.norm(dim=1, keepdim=True))  # [L, d, d_sae]
        self.b_enc = torch.nn.Parameter(torch.zeros(layers, self.d_sae))
        self.pairs = [(src, m) for m in range(layers) for src in range(m + 1) if cross or src == m]
        dec = {}
        for src, m in self.pairs:
            w = torch.randn(self.d_sae, d, generator=g)
            dec[f"{src}_{m}"] = torch.nn.Parameter(w / w.norm(dim=1, keepdim=True) * (1.0 if src == m else 0.1))
        self.W_dec = torch.nn.ParameterDict(dec)  # "l_m": [d_sae, d]
        self.b_dec = torch.nn.Parameter(y_mean.clone())  # [L, d]
        self.W_skip = torch.nn.Parameter(torch.zeros(layers, d, d))  # [L, d_out, d_in]

    def encode(self, layer: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(standardised x [n, d], pre-activations [n, d_sae], (values, indices) [n, k] each) of layer's input."""
        xs = (x.to(self.shift.device).float() - self.shift[layer]) / self.scale[layer]
        pre = xs @ self.W_enc[layer] + self.b_enc[layer]
        top = pre.topk(self.k, dim=-1, sorted=False)
        return xs, pre, (F.relu(top.values), top.indices)

    def decode(self, m: int, codes: dict, xs: dict) -> torch.Tensor:
        """Layer m's output [n, d] from the codes of layers ≤ m and its own standardised input."""
        out = self.b_dec[m] + xs[m] @ self.W_skip[m].T
        for src in range(m + 1):
            if (src, m) in self.pairs:
                v, i = codes[src]
                out = out + F.embedding_bag(i, self.W_dec[f"{src}_{m}"], per_sample_weights=v, mode="sum")
        return out


def read(lm, texts, tokens, masking):
    from bertscope.features.activations import points_activations
    from bertscope.features.transcoder import INPUT_POINT, OUTPUT_POINT

    acts = points_activations(lm, texts, range(lm.num_layers), (INPUT_POINT, OUTPUT_POINT), tokens, masking=masking)
    return ([torch.from_numpy(np.array(acts[(ly, INPUT_POINT)].rows)) for ly in range(lm.num_layers)],  # [n, d] f16
            [torch.from_numpy(np.array(acts[(ly, OUTPUT_POINT)].rows)) for ly in range(lm.num_layers)])


def train(coder: Coder, X, Y, epochs: int) -> float:
    """The kind trained on (X, Y) (lists of [n, d] a layer); returns the seconds."""
    started, n, L, device = time.perf_counter(), len(X[0]), coder.layers, coder.shift.device
    var = [float((y[:20000].float() - y[:20000].float().mean(0)).pow(2).sum(1).mean()) for y in Y]
    lr = 2e-4 / (coder.d_sae / 2**14) ** 0.5
    opt = torch.optim.Adam(coder.parameters(), lr=lr, eps=6.25e-10)
    per_epoch = n // BATCH
    total, step = per_epoch * epochs, 0
    since = torch.zeros(L, coder.d_sae, dtype=torch.long, device=device)  # tokens since each feature last fired
    for epoch in range(epochs):
        order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
        for s in range(per_epoch):
            rows = order[s * BATCH:(s + 1) * BATCH]
            xs, pres, codes = {}, {}, {}
            for ly in range(L):
                xs[ly], pres[ly], codes[ly] = coder.encode(ly, X[ly][rows])
            loss = aux = torch.zeros((), device=device)
            for m in range(L):
                err = Y[m][rows].to(device).float() - coder.decode(m, codes, xs)  # [batch, d]
                loss = loss + err.pow(2).sum(1).mean() / var[m]
                aux = aux + auxk(coder, m, pres[m], codes[m], err, since[m]) / var[m]
            opt.zero_grad(set_to_none=True)
            (loss + aux / 32).backward()
            torch.nn.utils.clip_grad_norm_(coder.parameters(), 1.0)
            for group in opt.param_groups:
                group["lr"] = lr * min(1.0, (total - step) / (0.2 * total))
            opt.step()
            step += 1
    return time.perf_counter() - started


def auxk(coder: Coder, m: int, pre: torch.Tensor, code, err: torch.Tensor, since: torch.Tensor) -> torch.Tensor:
    """Gao et al.'s AuxK on layer m's own decoder: the dead features (silent for 100,000 tokens) rebuild the error."""
    values, indices = code
    since += len(pre)
    since[indices[values > 0]] = 0
    dead = since > 100_000
    if not dead.any():
        return torch.zeros((), device=pre.device)
    take = min(int(dead.sum()), pre.shape[1] // 2)
    top = pre.masked_fill(~dead[None], float("-inf")).topk(take, dim=-1, sorted=False)
    rebuilt = F.embedding_bag(top.indices, coder.W_dec[f"{m}_{m}"], per_sample_weights=F.relu(top.values), mode="sum")
    return (err.detach() - rebuilt).pow(2).sum(1).mean() * min(take / (pre.shape[1] // 2), 1.0)


@torch.no_grad()
def held_fve(coder: Coder, X, Y) -> list[float]:
    L, n = coder.layers, len(X[0])
    error = [0.0] * L
    total = [float((y.double() - y.double().mean(0)).pow(2).sum()) for y in Y]
    for s in range(0, n, 8192):
        xs, codes = {}, {}
        for ly in range(L):
            xs[ly], _, codes[ly] = coder.encode(ly, X[ly][s:s + 8192])
        for m in range(L):
            error[m] += float((Y[m][s:s + 8192].to(coder.shift.device).float() - coder.decode(m, codes, xs))
                              .double().pow(2).sum())
    return [1 - e / t for e, t in zip(error, total)]


def replacement(lm, coder: Coder, texts) -> dict:
    """The replacement model (every feed-forward the coder's, its features chosen on the replacement run's own
    inputs) at BERT's masked positions: ``masked_quality``."""
    from bertscope.features.transcoder import INPUT_POINT, OUTPUT_POINT
    from bertscope.features.transcoder_training import masked_quality, replaced_positions

    def hooks(feed: dict) -> dict:
        keep = replaced_positions(lm, feed)  # [batch, token]
        seen, xs, codes, out = {}, {}, {}, {}
        for layer in range(coder.layers):
            def take(x, _, layer=layer):
                seen[layer] = x

            def write(y, _, layer=layer):  # y: [batch, token, d], the real feed-forward
                xs[layer], _, codes[layer] = coder.encode(layer, seen.pop(layer).reshape(-1, y.shape[-1]))
                made = coder.decode(layer, codes, xs).reshape(y.shape).to(y.dtype)
                return torch.where(keep[..., None], made, y)

            out[f"blocks.{layer}.{INPUT_POINT}"] = take
            out[f"blocks.{layer}.{OUTPUT_POINT}"] = write
        return out

    with torch.no_grad():
        return masked_quality(lm, hooks, texts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=400_000, help="training word pieces (default 400,000)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--k", type=int, default=48)
    p.add_argument("--kinds", default="cross,per-layer")
    p.add_argument("--held-out", type=int, default=300, help="held-out texts from each source (default 300)")
    p.add_argument("--device", default="auto", help="cpu, cuda, mps or auto (default)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from bertscope.cli.sae import texts_for
    from bertscope.core.models import load_model

    torch.manual_seed(0)
    lm = load_model("bundled-mlm", device=args.device)
    training, held = texts_for("mixture", args.tokens, args.held_out, 0)
    X, Y = read(lm, training.texts, args.tokens, 0)
    HX, HY = read(lm, held.texts, 10**9, None)
    shift = torch.stack([x[:20000].float().mean(0) for x in X])
    scale = torch.stack([x[:20000].float().std(0).clamp_min(1e-3) for x in X])
    y_mean = torch.stack([y[:20000].float().mean(0) for y in Y])
    rows = []
    out = sys.stderr if args.json else sys.stdout
    print(f"bundled-mlm, {len(X[0]):,} training word pieces x {args.epochs} epochs, k = {args.k}, "
          f"{EXPANSION}x features a layer; {len(held.texts):,} held-out texts", file=out)
    for kind in args.kinds.split(","):
        coder = Coder(lm.num_layers, lm.hidden_size, args.k, kind == "cross", shift, scale, y_mean).to(lm.device)
        seconds = train(coder, X, Y, args.epochs)
        fve = held_fve(coder, HX, HY)
        q = replacement(lm, coder, held.texts)
        rows.append({"kind": kind, "fve": fve, "seconds": seconds, **q})
        print(f"{kind:<10} FVE {' / '.join(f'{f:.3f}' for f in fve)}; replacement: top-1 agreement "
              f"{q['top1_agreement']:.3f}, KL {q['kl']:.3f} ({q['positions']:,} positions); trained in {seconds:.0f} s",
              file=out, flush=True)
    if args.json:
        print(json.dumps({"tokens": len(X[0]), "epochs": args.epochs, "k": args.k, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
