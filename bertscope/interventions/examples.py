"""Patching examples (clean text, corrupted text, candidate A, candidate B), each chosen after running it
on the default model, bundled-mlm: the clean run prefers A and the corrupted run prefers B, so the
difference patching recovers is the behaviour the example names (tests/interventions/test_examples.py
checks it on the real model). The classic "The keys to the cabinet [MASK] on the table." is not among
them: bundled-mlm predicts "," there and prefers "is" to "are" (logit difference -1.32), so it would
trace a failure."""

PATCH_EXAMPLES: dict[str, tuple[str, str, str, str]] = {
    # clean +1.59 (were, p 0.69, the top prediction), corrupted -3.04, with the singular "table" in between
    "Subject–verb agreement": ("The men at the table [MASK] tired.", "The man at the table [MASK] tired.",
                               "were", "was"),
    "Pronoun and gender": ("The woman said that [MASK] was tired.", "The man said that [MASK] was tired.",
                           "she", "he"),
    "Capital cities": ("Paris is the capital of [MASK].", "Rome is the capital of [MASK].", "france", "italy"),
}
