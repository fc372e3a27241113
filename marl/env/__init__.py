"""The multi-agent environment and what an agent observes: one priority agent per partition over the simulator.

``priority_env`` (agents score every job of their partition and, placing, its GPU types; the RLlib env),
``priority_agents`` (the rounds they share with deployment: dispatch between partitions, hand-off, moves),
``priority_features`` and ``topology_obs`` (what they see of their jobs and of the topology),
``partitions`` (a partition as a stand-alone cluster for placement) and ``standard_envs`` (PettingZoo and
Gymnasium interfaces).
"""
