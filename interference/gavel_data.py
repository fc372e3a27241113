"""Gavel's measured co-location throughputs as a tidy table.

Gavel (Narayanan et al., OSDI'20) ran every pair of its 26 job types together on one GPU of each type
(K80, P100, V100) and recorded both jobs' throughputs next to each job's isolated throughput. Two files
hold them, with the same content layout and different key spellings:

- ``simulation_throughputs.json``: ``{worker: {"('<type>', <scale>)": {"null": solo, "('<other>', <scale>)":
  [tput_self, tput_other]}}}``, with scale factors 1, 2, 4, 8 (multi-GPU jobs whose GPUs are shared);
- ``oracle_throughputs.json``: ``{worker: {"<type>": {"null": solo, "<other>": [tput_self, tput_other]}}}``,
  scale factor 1 only.

Throughputs are steps per second. A pair recorded as ``[0, 0]`` did not fit on the GPU together
(infeasible); a job whose own solo throughput is 0 did not fit alone. Worker types ending in
``_unconsolidated`` are multi-GPU jobs spread across servers: a placement effect, not interference, so
they are not read here.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from interference.base import JobDescriptor
from interference.gavel_jobs import gavel_descriptor, gavel_family_of, parse_gavel_job_type

GAVEL_GPU_TYPES = ("K80", "P100", "V100")
DEFAULT_FILE = "simulation_throughputs.json"


@dataclass(frozen=True, eq=False)
class GavelPairs:
    """One row per measured unordered pair of jobs on one GPU; normalised throughput = paired / solo.

    For a pair of two instances of the same type (``job_a == job_b``) the two columns are the two
    instances. Infeasible rows have ``feasible == False`` and NaN throughputs.
    """

    gpu_type: np.ndarray  # str (N,), "K80" | "P100" | "V100"
    job_a: np.ndarray  # str (N,), Gavel job type
    job_b: np.ndarray  # str (N,)
    scale_factor: np.ndarray  # int32 (N,), GPUs per job (both jobs have the same)
    norm_a: np.ndarray  # float64 (N,), throughput of A next to B / A alone
    norm_b: np.ndarray  # float64 (N,)
    feasible: np.ndarray  # bool (N,)
    solo_steps: dict[tuple[str, str, int], float]  # (gpu, job type, scale) -> isolated steps/s (0: does not fit)
    source: str

    def __len__(self) -> int:
        return len(self.job_a)

    def select(self, mask: np.ndarray) -> GavelPairs:
        """The rows where ``mask`` holds."""
        return GavelPairs(
            gpu_type=self.gpu_type[mask],
            job_a=self.job_a[mask],
            job_b=self.job_b[mask],
            scale_factor=self.scale_factor[mask],
            norm_a=self.norm_a[mask],
            norm_b=self.norm_b[mask],
            feasible=self.feasible[mask],
            solo_steps=self.solo_steps,
            source=self.source,
        )

    def descriptor(self, gpu_type: str, job_type: str) -> JobDescriptor:
        """Descriptor of a job type on a GPU type, with its measured single-GPU solo throughput."""
        return gavel_descriptor(job_type, gpu_type, self.solo_steps[(gpu_type, job_type, 1)])

    @property
    def descriptors(self) -> dict[tuple[str, str], JobDescriptor]:
        """Descriptors of every job type that runs alone on a single GPU of each GPU type."""
        return {(g, j): gavel_descriptor(j, g, s) for (g, j, sf), s in self.solo_steps.items() if sf == 1 and s > 0}

    def family_a(self) -> np.ndarray:
        return np.array([gavel_family_of(j) for j in self.job_a])

    def family_b(self) -> np.ndarray:
        return np.array([gavel_family_of(j) for j in self.job_b])

    def to_csv(self, path: str | Path) -> None:
        """Write the table (atomically) with columns gpu_type, job_a, job_b, scale_factor, norm_a, norm_b, feasible."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w") as f:
            f.write("gpu_type,job_a,job_b,scale_factor,norm_a,norm_b,feasible\n")
            for i in range(len(self)):
                f.write(
                    f'{self.gpu_type[i]},"{self.job_a[i]}","{self.job_b[i]}",{self.scale_factor[i]},'
                    f"{self.norm_a[i]:.6g},{self.norm_b[i]:.6g},{int(self.feasible[i])}\n"
                )
        tmp.replace(path)


def resolve_gavel_path(path: str | Path) -> Path:
    """A Gavel throughput file from a file path, a directory holding one, or a ``gavel:PATH`` spec."""
    text = str(path)
    if text.startswith("gavel:"):
        text = text[len("gavel:") :]
    p = Path(text)
    if p.is_dir():
        p = p / DEFAULT_FILE
    if not p.is_file():
        raise FileNotFoundError(
            f"Gavel throughput file {p} not found; pass gavel:PATH with PATH a Gavel "
            f"simulation_throughputs.json / oracle_throughputs.json or the folder holding {DEFAULT_FILE}"
        )
    return p


def _parse_key(key: str, where: str) -> tuple[str, int]:
    """``"('ResNet-18 (batch size 16)', 1)"`` -> (type, 1); a bare ``"A3C"`` -> ("A3C", 1)."""
    if key.startswith("("):
        try:
            value = ast.literal_eval(key)
        except (ValueError, SyntaxError):
            value = None
        if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str)):
            raise ValueError(f"{where}: key {key!r} is not of the form \"('<job type>', <scale factor>)\"")
        job, sf = value
        if not isinstance(sf, int) or sf < 1:
            raise ValueError(f"{where}: key {key!r} has scale factor {sf!r}; expected a positive integer")
    else:
        job, sf = key, 1
    parse_gavel_job_type(job)  # raises with the known families on a typo
    return job, sf


def _number(x: object, where: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not np.isfinite(x) or x < 0:
        raise ValueError(f"{where}: expected a non-negative number, got {x!r}")
    return float(x)


def load_gavel_pairs(path: str | Path, scale_factors: tuple[int, ...] = (1,)) -> GavelPairs:
    """Read a Gavel throughput file into :class:`GavelPairs` (pairs of jobs with equal scale factor).

    Raises ``ValueError`` naming the file and the offending key when the structure is not Gavel's.
    """
    p = resolve_gavel_path(path)
    try:
        raw = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"{p}: expected a JSON object keyed by worker type (k80, p100, v100)")
    workers = {w: t for w, t in raw.items() if w.upper() in GAVEL_GPU_TYPES}
    if not workers:
        raise ValueError(f"{p}: no worker type among {', '.join(g.lower() for g in GAVEL_GPU_TYPES)}")

    solo: dict[tuple[str, str, int], float] = {}
    rows: list[tuple[str, str, str, int, float, float, bool]] = []
    for worker, table in workers.items():
        gpu = worker.upper()
        if not isinstance(table, dict):
            raise ValueError(f"{p}: [{worker}] must map job keys to measurement objects")
        parsed: dict[str, tuple[str, int]] = {}
        for key, entry in table.items():
            where = f"{p}: [{worker}][{key}]"
            parsed[key] = _parse_key(key, where)
            if not isinstance(entry, dict) or "null" not in entry:
                raise ValueError(f"{where} must be an object with a 'null' (isolated throughput) entry")
            job, sf = parsed[key]
            solo[(gpu, job, sf)] = _number(entry["null"], where + "[null]")
        order = {key: i for i, key in enumerate(table)}
        for key, entry in table.items():
            job, sf = parsed[key]
            if sf not in scale_factors:
                continue
            for other, pair in entry.items():
                if other == "null":
                    continue
                where = f"{p}: [{worker}][{key}][{other}]"
                if other not in table:
                    raise ValueError(f"{where}: the other job has no entry of its own in [{worker}]")
                if order[other] < order[key]:
                    continue  # one row per unordered pair; the mirror entry carries the same numbers
                job_b, sf_b = parsed[other]
                if sf_b != sf:
                    continue
                if not (isinstance(pair, list) and len(pair) == 2):
                    raise ValueError(f"{where}: expected [throughput of this job, of the other], got {pair!r}")
                ta, tb = _number(pair[0], where + "[0]"), _number(pair[1], where + "[1]")
                sa, sb = solo[(gpu, job, sf)], solo[(gpu, job_b, sf)]
                feasible = ta > 0 and tb > 0 and sa > 0 and sb > 0
                na = ta / sa if feasible else np.nan
                nb = tb / sb if feasible else np.nan
                rows.append((gpu, job, job_b, sf, na, nb, feasible))
    if not rows:
        raise ValueError(f"{p}: no job pairs with scale factor in {scale_factors}")
    gpu_c, a_c, b_c, sf_c, na_c, nb_c, f_c = zip(*rows, strict=True)
    return GavelPairs(
        gpu_type=np.array(gpu_c),
        job_a=np.array(a_c),
        job_b=np.array(b_c),
        scale_factor=np.array(sf_c, dtype=np.int32),
        norm_a=np.array(na_c, dtype=np.float64),
        norm_b=np.array(nb_c, dtype=np.float64),
        feasible=np.array(f_c, dtype=bool),
        solo_steps=solo,
        source=str(p),
    )
