"""What the pretraining heads say: ``fill_mask``, ``masking`` (BERT's masking rule, its one home),
``mlm_recipe`` (the 80/10/10 corruption of one text, predicted), ``logit_lens`` (the head read at
every layer), ``nsp`` (next-sentence and sentence-order prediction).
May import: ``errors``, ``runtime``, ``sources``, ``core``.
"""
