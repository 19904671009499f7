"""Engines that run BertScope's corpus-wide passes beyond this process.

``ray_engine``: head statistics, head importance, the hidden states behind probes and corpus
search, the faithfulness test and CKA between two models on a Ray cluster (Ray Data, one actor
per GPU or CPU), merged into the same results and cache entries as the single-process path. Ray is imported only
when an engine is asked for; only ``cli`` and ``probes`` import it. May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``outputs``, ``analysis``, ``attribution``,
``training``, ``interventions``.
"""
