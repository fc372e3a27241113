"""The priority agents, marlsched's own: one agent per partition of the data center, all sharing one network.

- Network: a set encoder of the partition's jobs and of every partition's summary, plus, where the agents place,
  the hierarchical topology encoder (torch-geometric, GPU -> server -> rack -> partition); weights that depend
  on no size (``marl.models.priority_net``).
- Decision (``env.decision``): ``partitions``, a Decima-style order over all jobs of the partition (start, keep,
  preempt with a margin) and, placing, a score per (job, GPU type) that picks the type a job starts on and moves
  running jobs to a faster one (``marl.env.priority_agents``; untrained, QSSF); or ``gavel-las``, the agents'
  scores lean one cluster-wide round of Gavel's LP (``marl.env.rounds_agents``; untrained, ``gavel-las``, the
  best heuristic on mixed GPUs).
- Observes: requests, tenant, wait, attained service and the tenant's history of finished jobs; never a job's own
  duration (``marl.env.priority_features``, ``marl.env.topology_obs``); placing, with ``interference_inputs``,
  also a learned interference predictor's estimates where jobs share servers (``marl.env.interference_obs``).

The default agent, the system marlsched describes, is this agent placing with the predictor's estimates, warm
started by imitation (``dagger``) and then trained with ``ppo``: ``experiments/configs/default_imitation.yaml``,
then ``default_small.yaml``; on mixed GPUs, on gavel-las's rounds from the untrained network,
``default_hetero.yaml``. ``ppo`` can also run the imitation itself, in RLlib's learner
(``marl.training.imitation``: ``default_small_one_pipeline.yaml``).
"""

from marl.agents.spec import AgentSpec, Algorithm

SPEC = AgentSpec(
    name="priority",
    about="per-partition agents sharing one network: who runs, in what order, on which GPU type",
    network="marl.deploy.priority_export:network_of",
    decision="marl.env.priority_agents:PriorityAgents",
    observes="marl.env.priority_features:JOB_FEATURES",
    loader="marl.deploy.priority_export:load_priority_policy",
    algorithms=(
        Algorithm("ppo", "per-partition agents, shared RLModule, RLlib PPO (ppo.imitation_coef: DAgger's label in "
                  "its learner first)",
                  "marl.training.priority_train:train_priority", "ppo.iterations",
                  "experiments/configs/default_small.yaml", parse="marl.training.priority_train:parse_checked"),
        Algorithm("appo", "the same agents and module, RLlib APPO (asynchronous: runners sample while it learns)",
                  "marl.training.priority_train:train_priority", "ppo.iterations",
                  "experiments/configs/default_small_appo.yaml",
                  parse="marl.training.priority_train:parse_checked_appo"),
        Algorithm("dagger", "DAgger on the true remaining time (privileged label)",
                  "marl.training.priority_dagger:train", "dagger_rounds",
                  "experiments/configs/default_imitation.yaml",
                  settings="marl.training.priority_dagger:PriorityDaggerConfig"),
        Algorithm("es", "evolution strategies on the placing agents' GPU-type head", "marl.training.placing_es:train",
                  "iterations", "experiments/configs/placing_es_small_hetero.yaml",
                  settings="marl.training.placing_es:PlacingESConfig"),
    ),
)  # fmt: skip
