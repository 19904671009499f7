"""Engines that run BertScope's corpus-wide passes beyond this process: Ray Data (``ray_engine``)."""
