"""Targets spread over snapshot runs: each target belongs to one of N shards, chosen by rendezvous hashing.

Every target goes to exactly one shard, and the choice depends only on the target's name and N, so it is stable from
run to run. Adding or removing a target moves no other target; going from N to N + 1 shards moves only the targets
the new shard wins, about 1/(N + 1) of them (rendezvous, or highest-random-weight, hashing: Thaler and Ravishankar,
1998). Each shard's run can then go to a process, or a pod, of its own.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from radar_pipeline.config import Target


def shard_of(target: str, shards: int) -> int:
    """The shard (0 … shards − 1) that scrapes `target`: the one whose hash with the target's name is highest."""
    if shards < 1:
        raise ValueError(f"shards must be at least 1, not {shards}")
    return max(range(shards), key=lambda shard: _weight(target, shard))


def targets_of_shard(targets: Sequence[Target], shard: int, shards: int) -> list[Target]:
    """The targets that shard `shard` of `shards` scrapes."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard must lie in 0 … {shards - 1}, not {shard}")
    return [t for t in targets if shard_of(t.name, shards) == shard]


def _weight(target: str, shard: int) -> int:
    digest = hashlib.blake2b(f"{shard}\x00{target}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")
