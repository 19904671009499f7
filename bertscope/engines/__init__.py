"""Engines that run BertScope's corpus-wide passes beyond this process.

``ray_engine.RayEngine`` is the library's ``runtime.engine.Engine`` on a Ray cluster (Ray Data,
one actor per GPU or CPU): the library's own ``head_stats``, ``head_importance``,
``hidden_states`` (probes, corpus search), ``faithfulness``, ``compare_layers`` and a corpus's
sentence embeddings (``retrieval.embed``, a search index) take it as ``engine=``, plan the work and merge what comes back into the same results and cache entries as
the single-process path. ``ray_cluster`` (where it runs), ``ray_actor`` (the model actor). Ray is
imported only when an engine is asked for; only ``cli`` and ``probes`` import this package.
May import: ``errors``, ``runtime``, ``sources``, ``corpora``, ``core``, ``mlm``, ``analysis``,
``attribution``, ``training``, ``interventions``, ``retrieval``.
"""
