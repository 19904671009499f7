"""Test a claim by changing the model and watching the output: causal interventions.

On the named hook points (``core.hook_points``: each head's context ``attn.hook_z`` or a hidden
state ``embed`` / ``hook_resid_post``, edited on the loaded model's own modules, for the calling
thread only): ``ablation`` (zero or mean-ablate heads; the
prediction before and after), ``importance`` (Michel et al. 2019: head importance from gate
gradients, and the pruning curve against random orders), ``patching`` (clean states patched into a
corrupted run, per layer and position or per head: Vig et al. 2020; Meng et al. 2022).
May import every floor up to ``attribution`` (its targets) and ``training`` (BERT's corruption).
"""
