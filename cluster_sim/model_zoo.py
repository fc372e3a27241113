"""Common training jobs with their public facts.

Parameter counts and forward FLOPs are the figures published with each model (papers and model cards);
training FLOPs per sample are taken as 3x forward (forward + backward). The Pollux names are the
applications whose step times were measured in ``pollux-osdi21/traces/<name>/placements.csv``; the Gavel
names prefix the job types of Gavel's throughput tables.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    name: str
    params_m: float  # parameters, millions
    gflops: float  # training GFLOPs per sample (forward + backward)
    default_batch: int  # global batch size a job of this model starts with
    pollux_name: str | None = None  # measured in pollux-osdi21/traces/<pollux_name>/
    gavel_name: str | None = None  # job-type prefix in Gavel's tables, e.g. "ResNet-18"
    amp: bool = False


ZOO: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        # ResNet-18 on CIFAR-10: 11.2M params, 0.56 GFLOPs forward at 32x32.
        ModelSpec("resnet18-cifar10", 11.2, 1.67, 128, pollux_name="cifar10", gavel_name="ResNet-18"),
        # ResNet-50 on ImageNet: 25.6M params, 4.1 GFLOPs forward at 224x224.
        ModelSpec("resnet50-imagenet", 25.6, 12.3, 200, pollux_name="imagenet", gavel_name="ResNet-50"),
        # BERT-base fine-tuning on SQuAD, sequence length 384: 110M params, ~84 GFLOPs forward.
        ModelSpec("bert-squad", 110.0, 253.0, 12, pollux_name="bert"),
        # DeepSpeech2 on CommonVoice (Pollux's setup): ~38M params, ~10 GFLOPs forward per utterance.
        ModelSpec("deepspeech2", 38.0, 30.0, 20, pollux_name="deepspeech2"),
        # YOLOv3 at 416x416: 61.9M params, 65.9 GFLOPs forward.
        ModelSpec("yolov3", 61.9, 198.0, 8, pollux_name="yolov3"),
        # NeuMF on MovieLens-1M as Pollux ran it (adaptdl examples/NCF: 32 factors, 3 MLP layers):
        # 9,746 users+items x (32 + 128) embedding values + a 256-128-64-32 MLP = 1.6M params;
        # ~0.09 MFLOPs forward per sample (the MLP; embedding lookups are gathers).
        ModelSpec("ncf", 1.6, 0.0003, 256, pollux_name="ncf"),
        # Transformer (base) on Multi30k, ~30 tokens per sentence: ~48M params.
        ModelSpec("transformer", 48.0, 8.6, 128, gavel_name="Transformer"),
        # 2-layer LSTM word language model on WikiText-2 (650 hidden, 35 tokens): ~28M params.
        ModelSpec("lstm-lm", 28.0, 1.5, 20, gavel_name="LM"),
        # Variational autoencoder recommender on MovieLens-20M: ~10M params.
        ModelSpec("recommendation", 10.0, 0.06, 2048, gavel_name="Recommendation"),
        # A3C on Atari Pong: ~1M params, small conv net.
        ModelSpec("a3c", 1.0, 0.1, 4, gavel_name="A3C"),
        # CycleGAN at 256x256: two generators and two discriminators, ~28M params, ~57 GFLOPs forward.
        ModelSpec("cyclegan", 28.3, 171.0, 1, gavel_name="CycleGAN"),
    )
}

MODEL_NAMES: tuple[str, ...] = tuple(ZOO)


def model_index(name: str) -> int:
    """Position of a zoo model in :data:`MODEL_NAMES`; raises with the known names on a typo."""
    try:
        return MODEL_NAMES.index(name)
    except ValueError:
        raise KeyError(f"unknown model {name!r}; the model zoo has: {', '.join(MODEL_NAMES)}") from None
