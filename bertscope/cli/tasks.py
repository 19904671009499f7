"""``predict``: what a fine-tuned model decides (classifiers, taggers, question answering), on a text or a file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bertscope.cli.common import Command, load, progress_bar, read_text
from bertscope.errors import BertScopeError


def cmd_predict(args: argparse.Namespace) -> Any:
    from bertscope.tasks.predict import predict, read_records

    if (args.text is None) == (args.file is None):
        raise BertScopeError("Give a TEXT or --file (a .csv or .jsonl of records), not both.")
    if args.file is not None:
        records = read_records(read_text(args.file, "records"), Path(args.file).name)
        if args.pair is not None or args.question is not None:
            raise BertScopeError("--pair and --question go with a TEXT; a file gives them in its own columns.")
        texts, pairs, gold, questions = records.texts, records.pairs, records.gold, records.questions
    else:
        texts, pairs, gold = [args.text], None if args.pair is None else [args.pair], None
        questions = None if args.question is None else [args.question]
    if args.by_layer and args.file is not None:
        raise BertScopeError("--by-layer reads one TEXT at every hidden state; leave out --file.")
    lm = load(args)
    with progress_bar("Predicting", "text") as progress:
        out = predict(lm, texts, pairs, args.top_k, gold, progress=progress if len(texts) > 32 else None,
                      questions=questions)
    if args.by_layer:
        from bertscope.tasks.layer_lens import layer_decisions

        out["items"][0]["by_layer"] = layer_decisions(lm, texts[0], pairs[0] if pairs else None).to_json()
    out["model"] = lm.name
    if args.json:
        return out
    return _text(out)


def _text(out: dict) -> str:
    lines = [f"{out['model']}: {out['task'].replace('-', ' ')}"]
    for item in out["items"]:
        if out["task"] == "sequence-classification":
            head = item["text"] + (f"  ||  {item['pair']}" if item["pair"] else "")
            lines.append(f"  {head[:100]}")
            lines += [f"    {s['label']:<24} {s['score']:.4f}" for s in item["scores"]]
            if "by_layer" in item:
                lens = item["by_layer"]
                lines.append(f"    decided from hidden state {lens['decided_from']} on; by hidden state: " + ", ".join(
                    f"{row['layer']} {max(row['scores'], key=row['scores'].get)}" for row in lens["layers"]))
        elif out["task"] == "question-answering":
            lines.append(f"  Q: {item['question'][:100]}")
            lines += [f"    {a['answer']!r} [{a['start']}:{a['end']}] {a['score']:.4f}" for a in item["answers"]]
        else:
            lines.append(f"  {item['text'][:100]}")
            lines += [f"    {e['entity_group']:<10} {e['word']!r} [{e['start']}:{e['end']}] {e['score']:.3f}"
                      for e in item["entities"]] or ["    (no entity)"]
    if "evaluation" in out:
        e = out["evaluation"]
        lines.append(f"  {e['records']:,} labelled records: accuracy {e['accuracy']:.4f}, macro-F1 {e['macro_f1']:.4f}, "
                     f"{e['misclassified_count']:,} misclassified (--json lists them and the confusion matrix)")
    return "\n".join(lines)


def _predict_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("text", nargs="?", help="the text to decide on (or --file)")
    p.add_argument("--pair", help="the second text of a pair (sentence-pair classifiers: NLI, paraphrase)")
    p.add_argument("--question", help="question-answering models: the question (TEXT is the context, cut into "
                                      "overlapping windows when it is longer than the model reads)")
    p.add_argument("--file", help="a .csv (text[,pair][,label]) or .jsonl of records; with labels, accuracy, "
                                  "macro-F1 and the confusion matrix too")
    p.add_argument("--by-layer", action="store_true", help="classifiers: the head read at every hidden state (the "
                                                               "embeddings, then each layer): where the decision is made")
    p.add_argument("--top-k", type=int, help="classification: the K best labels (default: every label); "
                                             "question answering: the K best answers (default 1)")


COMMANDS = [
    Command("predict", "what a fine-tuned model decides: every label's score (classifiers, text pairs), each "
            "token's label and the entities (taggers), the answer spans (question answering), on a text or a "
            "labelled file", cmd_predict,
            _predict_arguments),
]
