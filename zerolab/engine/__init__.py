"""The estimation engine: per-rank bytes of model states (memory, zero_terms, host_memory), traffic
(comm, deepspeed_traffic), activations (activations, activations_hf, activation_bytes), the models' shapes (models)
and units.

May import: zerolab.base and zerolab.errors. No torch, no deepspeed: `zerolab estimate` starts in milliseconds.
"""
