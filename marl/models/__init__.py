"""The networks: the hierarchical topology encoder (``hgnn``), the job-set encoder of the priority agents
(``priority_net``), the round scorer of (job, GPU type) pairs (``rounds_scorer``), the estimate of each job's
remaining work that weighs Sia's jobs (``remaining_work``), and their RLlib wrappers."""
