"""Feature-based against fine-tuned (the BERT paper's Table 7 question) on UD English-EWT UPOS: a
linear probe on the frozen encoder's first-piece word states, for each combination of layers,
beside the fine-tuned tagger, on EWT's dev words.

    python benchmarks/frozen_layers.py [--model bundled] [--tuned bundled-upos] [--out FILE.json]

The probes train on EWT's training words (``--max-train-words`` for a budget) and are scored on its
dev words; the fine-tuned row is the tagger's own dev accuracy and macro-F1, measured here on the
same words (first piece of each word, as it was trained). ``--out`` writes the table as JSON (the
Fine-tuning page shows ``bertscope/data/frozen_layers_upos.json``). Figures only.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def tuned_scores(name: str) -> dict:
    """The fine-tuned tagger on EWT dev: word accuracy and macro-F1 (first piece of each word)."""
    from bertscope import load_model
    from bertscope.training.task_data import load_task_data
    from bertscope.training.task_objective import TaskObjective, encode, scores

    lm = load_model(name)
    data = load_task_data("tag", "ewt-upos")
    labels = list(lm.task.labels)
    held = encode(lm.tokenizer, "tag", data.held_out, labels, lm.max_length)
    objective = TaskObjective("tag", labels, held, held, lm.tokenizer.pad_token_id, lm.device)
    _, count, confusion, _ = objective.predictions(lm.model, held, 64)
    out = scores(confusion, labels)
    return {"accuracy": out["accuracy"], "macro_f1": out["macro_f1"], "words": count,
            "unscored_words": held.unscored_words}


def main() -> None:
    from bertscope import load_model
    from bertscope.analysis.frozen_layers import TITLES, frozen_layer_probes
    from bertscope.analysis.hidden_cache import hidden_states
    from bertscope.corpora.ewt import ewt_task

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--tuned", default="bundled-upos", help="the fine-tuned tagger to set beside ('' for none)")
    parser.add_argument("--max-train-words", type=int)
    parser.add_argument("--out", help="write the table as JSON here")
    args = parser.parse_args()
    start = time.perf_counter()
    lm = load_model(args.model)
    train = hidden_states(lm, ewt_task("train"), "first")
    held = hidden_states(lm, ewt_task("dev"), "first")
    extracted = time.perf_counter() - start
    rows = [r.to_json() for r in frozen_layer_probes(train, held, max_train_words=args.max_train_words)]
    table = {"model": args.model, "data": "UD English-EWT UPOS: train words -> dev words",
             "train_words": len(train.labels) if args.max_train_words is None else args.max_train_words,
             "dev_words": len(held.labels), "rows": rows}
    if args.tuned:
        table["fine_tuned"] = {"model": args.tuned, **tuned_scores(args.tuned)}
    print(f"{args.model} on EWT UPOS ({table['train_words']:,} training words, {table['dev_words']:,} dev words; "
          f"states extracted in {extracted:.0f} s, probes in {time.perf_counter() - start - extracted:.0f} s):")
    print(f"{'features':<42}{'width':>7}{'accuracy':>10}{'macro-F1':>10}")
    for r in rows:
        print(f"{TITLES[r['features']]:<42}{r['width']:>7}{r['accuracy']:>10.4f}{r['macro_f1']:>10.4f}")
        if "state_weights" in r:
            print(" " * 4 + "state weights (embeddings, then layers 0 up): "
                  + ", ".join(f"{w:.2f}" for w in r["state_weights"]))
    if args.tuned:
        t = table["fine_tuned"]
        print(f"{'fine-tuned: ' + args.tuned:<42}{'':>7}{t['accuracy']:>10.4f}{t['macro_f1']:>10.4f}")
    if args.out:
        Path(args.out).write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
