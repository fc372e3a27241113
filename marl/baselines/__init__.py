"""Published learned schedulers, rebuilt as trained baselines that run beside marlsched's own agents.

- :mod:`marl.baselines.topdrl`: TopDRL (Ayadi et al., JPDC 2025): a multi-branch CNN picks the next job
  from an image of the cluster's GPUs and the waiting jobs; the closest free GPUs in the topology run it.
  Trained by :mod:`marl.baselines.topdrl_train` (policy gradient, DeepRM's per-workload baseline).

Each loads from its exported folder as ``--policy NAME:DIR`` and runs on TorchScript alone (no RLlib).
"""
