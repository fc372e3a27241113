"""The networks: the job-set encoder of the priority agents and its placing form (``priority_net``) with the
partition's hierarchical encoder (``topology_encoder``) and their RLlib module (``priority_module``), the round
scorer of (job, GPU type) pairs (``rounds_scorer``), and the estimate of each job's remaining work that
weighs Sia's jobs (``remaining_work``)."""
