"""The round scorer: one centralised network that scores every (job, GPU type) pair in Gavel-style rounds.

- Network: a pair scorer over each pair's features (``marl.models.rounds_scorer``), optionally on top of a fixed
  heuristic prior (gavel-las), so that the untrained network is that heuristic.
- Decision: every 360 s the pairs are assigned in score order, a job kept on its GPUs unless another pair beats it
  by ``stay`` (``cluster_sim.policies.rigid_rounds.ScoredRounds``).
- Observes: each pair's relative speed, attained service, GPUs asked and the type's free share; no duration.
"""

from marl.agents.spec import AgentSpec, Algorithm

SPEC = AgentSpec(
    name="rounds",
    about="a round scorer of (job, GPU type) pairs on mixed GPUs",
    network="marl.deploy.rounds_policy:network_of",
    decision="cluster_sim.policies.rigid_rounds:ScoredRounds",
    observes="marl.models.rounds_scorer:FEATURES",
    loader="marl.deploy.rounds_policy:load_rounds_policy",
    algorithms=(
        Algorithm("es", "evolution strategies on the round scorer", "marl.training.rounds_es:train", "iterations",
                  "experiments/configs/rounds_es_small_hetero.yaml", settings="marl.training.rounds_es:RoundsESConfig"),
        Algorithm("dagger", "DAgger on a teacher's rounds", "marl.training.rounds_imitation:train", "iterations",
                  "experiments/configs/rounds_dagger_lookahead.yaml",
                  settings="marl.training.rounds_imitation:ImitationConfig"),
    ),
)  # fmt: skip
