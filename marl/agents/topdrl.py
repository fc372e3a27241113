"""TopDRL (a learned job picker plus the closest-GPUs placement), as published.

- Network: a convolution over the cluster's occupancy image and the visible jobs' features (``marl.baselines.topdrl``).
- Decision: pick one of the first ``slots`` waiting jobs, place it on the closest free GPUs.
- Observes: the cluster image, each visible job's request, wait and attained service.
"""

from marl.agents.spec import AgentSpec, Algorithm

SPEC = AgentSpec(
    name="topdrl",
    about="TopDRL: a learned job picker with the closest-GPUs placement",
    network="marl.baselines.topdrl:network_of",
    decision="marl.baselines.topdrl:TopDRL",
    observes="marl.baselines.topdrl:JOB_FEATURES",
    loader="marl.baselines.topdrl:load_topdrl_policy",
    algorithms=(
        Algorithm("pg", "TopDRL: policy gradient on the job picker", "marl.baselines.topdrl_train:train_topdrl",
                  "train.iterations", "experiments/configs/topdrl_small.yaml",
                  parse="marl.baselines.topdrl_train:parse_topdrl_config"),
    ),
)  # fmt: skip
