"""DL2 (warm start from an existing scheduler's decisions, then RL; grows and stops jobs), as published.

- Network: per-job scores of the next allocation step over the jobs' and the cluster's features
  (``marl.baselines.dl2``).
- Decision: repeated grow / stop steps per scheduling interval, each job's GPUs and batch resized (elastic).
- Observes: each job's GPUs, attained service, progress and the cluster's free GPUs.
"""

from marl.agents.spec import AgentSpec, Algorithm

SPEC = AgentSpec(
    name="dl2",
    about="DL2: learned grow/stop of elastic jobs",
    network="marl.baselines.dl2:network_of",
    decision="marl.baselines.dl2:DL2",
    observes="marl.baselines.dl2:JOB_FEATURES",
    loader="marl.baselines.dl2:load_dl2_policy",
    algorithms=(
        Algorithm("pg", "DL2: imitation warm start, then policy gradient", "marl.baselines.dl2_train:train_dl2",
                  "train.iterations", "experiments/configs/dl2_pollux.yaml",
                  parse="marl.baselines.dl2_train:parse_dl2_config"),
    ),
)  # fmt: skip
