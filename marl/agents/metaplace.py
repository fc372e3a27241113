"""Meta-RL placement that adapts to workload shifts, as published: weights meta-trained, context measured online.

- Network: least attained service plus a small network over each (job, GPU type) pair, kept as JSON weights
  (NumPy at run time, no torch file).
- Decision: scored rounds of (job, GPU type) pairs, with a context of measured speeds that carries over and
  grows while it runs (``marl.baselines.metaplace``).
- Observes: the context's speed estimates and their uncertainty, the type's share, the load, GPUs and service.
"""

from marl.agents.spec import AgentSpec, Algorithm

SPEC = AgentSpec(
    name="metaplace",
    about="meta-RL placement adapting to workload shifts",
    network=None,
    decision="marl.baselines.metaplace:MetaPlace",
    observes="marl.baselines.metaplace:FEATURES",
    loader="marl.baselines.metaplace:load_metaplace_policy",
    algorithms=(
        Algorithm("es", "meta-RL placement: evolution strategies over workload shifts",
                  "marl.baselines.metaplace_train:train_metaplace", "train.iterations",
                  "experiments/configs/metaplace_philly.yaml",
                  parse="marl.baselines.metaplace_train:parse_metaplace_config"),
    ),
)  # fmt: skip
