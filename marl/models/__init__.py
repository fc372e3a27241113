"""The networks: the candidate placements' graph network (``hgnn``), the job-set encoder of the priority agents
and its placing form (``priority_net``) with the partition's hierarchical encoder (``topology_encoder``),
the round scorer of (job, GPU type) pairs (``rounds_scorer``), the estimate of each job's remaining work
that weighs Sia's jobs (``remaining_work``), and their RLlib wrappers."""
