"""Deterministic random streams keyed by (seed, purpose, round, client).

Every random draw in a simulation comes from a stream named by what it is for, so results do
not depend on the order clients are processed in, on the executor, on the number of workers,
or on whether a run was resumed: client 17's batch order in round 40 is the same whatever else
happened. Streams are independent numpy ``Generator``s built from a ``SeedSequence`` whose
entropy is the tuple below (purposes are hashed with CRC32, which is stable across processes,
unlike ``hash``).
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

#: Round / client index used for draws that are not tied to a round or a client.
NONE = 2**31 - 1


def _purpose_key(purpose: str) -> int:
    return zlib.crc32(purpose.encode("utf-8"))


#: Seeds are one 32-bit word of a stream's entropy; a wider or negative seed is refused rather than
#: reduced modulo 2^32, which would make seeds 0 and 2^32 (or -1 and 2^32 - 1) the same population.
SEED_LIMIT = 2**32


def seed_sequence(seed: int, purpose: str, round: int = NONE, client: int = NONE) -> np.random.SeedSequence:
    seed = int(seed)
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"seed {seed} is outside [0, 2^32)")
    return np.random.SeedSequence([seed, _purpose_key(purpose), int(round), int(client)])


def launch_round(round: int, launch: int = 0) -> int:
    """The round key of the streams of launch ``launch`` of round ``round``: ``round`` itself for the launch at the
    round's open (0), a key no other (round, launch) has for a later one (an asynchronous round that refills a slot
    at each arrival launches several cohorts in one round; a client picked twice in a round must not replay the
    same minibatches). ``SeedSequence`` spreads a key above 2^32 over two words, so it meets no plain round."""
    return int(round) if not launch else int(round) + (int(launch) << 32)


def stream(seed: int, purpose: str, round: int = NONE, client: int = NONE) -> np.random.Generator:
    """An independent numpy generator for one (seed, purpose, round, client)."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, purpose, round, client)))


def int_seed(seed: int, purpose: str, round: int = NONE, client: int = NONE) -> int:
    """A 63-bit integer seed for libraries that want one (torch, legacy RandomState)."""
    state = seed_sequence(seed, purpose, round, client).generate_state(2, np.uint32)
    return int(state.view(np.uint64)[0] >> np.uint64(1))


def torch_generator(seed: int, purpose: str, round: int = NONE, client: int = NONE) -> torch.Generator:
    """A CPU torch generator for one (seed, purpose, round, client)."""
    g = torch.Generator()
    g.manual_seed(int_seed(seed, purpose, round, client))
    return g
