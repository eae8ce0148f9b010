"""Will it fit: the whole per-GPU budget (budget), setups ranked by step time (fit, step_time, gpus, host_speed),
the full-size simulation of real models (simulate, simulate_run, hf_models) and the error ledger (fit_ledger,
its record in data/).

May import: zerolab.engine, zerolab.base and zerolab.errors.
"""
