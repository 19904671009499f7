"""Attribution beyond raw attention, as a registry (``registry.METHODS``: one record per method).

``rollout`` (rollout and flow), ``blocks`` (norm-based attention, ALTI), ``gradients`` (gradient x
input, integrated gradients, targets), ``results`` (the types), ``methods`` (the entry points:
``attribute``, ``token_matrices``, ``token_scores``), ``explain`` (every method on one masked
prediction). May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``heads``,
``analysis``.
"""
