"""Published learned schedulers, rebuilt as trained baselines that run beside marlsched's own agents.

- :mod:`marl.baselines.topdrl`: TopDRL (Ayadi et al., JPDC 2025): a multi-branch CNN picks the next job
  from an image of the cluster's GPUs and the waiting jobs; the closest free GPUs in the topology run it.
  Trained by :mod:`marl.baselines.topdrl_train` (policy gradient, DeepRM's per-workload baseline).
- :mod:`marl.baselines.dl2`: DL2 (Peng et al.): a policy network gives elastic jobs GPUs in repeated small
  steps each round. Trained by :mod:`marl.baselines.dl2_train`: a warm start imitating Optimus (DAgger),
  then policy gradient.
- :mod:`marl.baselines.training`: what the trainers share (windows held out by time, returns, tables).

Each loads from its exported folder as ``--policy NAME:DIR`` and runs on TorchScript alone (no RLlib).
"""
