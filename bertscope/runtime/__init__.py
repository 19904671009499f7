"""The ground floor: the machine and transformers.

``devices`` (cuda > mps > cpu, dtypes), ``kernels`` (eager vs SDPA per pass on a shared model),
``hf`` (quiet loads, config and fast tokenizer with one clear error, the families BertScope
knows), ``user_cache`` (where BertScope keeps what it builds), ``result_cache`` (a byte-bounded,
thread-safe LRU), ``host_buffers`` (large CPU buffers on huge pages). May import: ``errors``.
"""
