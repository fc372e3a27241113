"""Deployment: exported policy folders (TorchScript + metadata) loaded without RLlib, the policies as
``cluster_sim`` schedulers, and agents grouped into Ray actors."""
