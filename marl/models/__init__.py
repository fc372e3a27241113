"""The networks: the hierarchical topology encoder (``hgnn``), the job-set encoder of the priority agents
(``priority_net``), the round scorer of (job, GPU type) pairs (``rounds_scorer``), and their RLlib wrappers."""
