"""Sia's per-job weights from a learned remaining-work estimate: the agent is a network inside Sia's allocation.

- Network: a regression of a job's remaining work from what a scheduler may see (``marl.models.remaining_work``).
- Decision: Sia's integer program every 60 s, each job weighted by (median estimate / its estimate) ** power
  (``marl.deploy.remaining_policy.LearnedWeightSia``).
- Observes: the tenant's history estimate of the remaining time, work executed, attained service, GPUs, age and
  the application; never the job's own duration.
"""

from marl.agents.spec import AgentSpec, Algorithm

SPEC = AgentSpec(
    name="sia-remaining",
    about="per-job weights in Sia's allocation from a learned remaining-work estimate",
    network="marl.deploy.remaining_policy:network_of",
    decision="marl.deploy.remaining_policy:LearnedWeightSia",
    observes="marl.models.remaining_work:FEATURES",
    loader="marl.deploy.remaining_policy:load_remaining_policy",
    algorithms=(
        Algorithm("dagger", "DAgger on the remaining work that weighs Sia's jobs", "marl.training.remaining_work:train",
                  "dagger_rounds", "experiments/configs/sia_remaining_philly.yaml",
                  settings="marl.training.remaining_work:RemainingWorkConfig"),
    ),
)  # fmt: skip
