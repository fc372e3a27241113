"""Training: configs, imitation warm start, PPO on RLlib's new API stack, evolution strategies, DAgger, the
run folder (progress, checkpoints, curves) and the evaluation written at the end of a run."""
