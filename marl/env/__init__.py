"""The multi-agent environments and what an agent observes: one agent per partition over the simulator.

``placement_env`` (agents choose among candidate placements), ``priority_env`` (agents score every job of
their partition and, placing, its GPU types; ``topology_obs`` is what they see of the topology), the rounds
they share with deployment (``coordinator``, ``priority_agents``), dispatch between partitions, and the
observation features and layouts.
"""
