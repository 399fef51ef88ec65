"""Random strings accepted by a Dfa, for tests and fuzzing."""

from __future__ import annotations

from collections import defaultdict

from sgl_runtime.constrained.automata import Charset, Dfa

_SAMPLE_POOL = 'abcxyzABZ019 _-.:/@#"\\\n\t\x01é中😀'


def sample(dfa: Dfa, rng, max_len: int = 200, stop_prob: float = 0.3) -> str | None:
    """A random string accepted by `dfa` (None if it accepts nothing); for tests and fuzzing.

    Walks random edges, stopping at a final state with probability `stop_prob`; past
    `max_len` characters it follows a shortest path to a final state."""
    if dfa.is_empty():
        return None
    dist = _distance_to_final(dfa)
    state, out = 0, []
    while True:
        if state in dfa.finals and (rng.random() < stop_prob or not dfa.edges[state]):
            return "".join(out)
        edges = dfa.edges[state]
        if len(out) >= max_len:
            edges = [e for e in edges if dist.get(e[1], 1 << 30) < dist[state]] or edges
            if state in dfa.finals:
                return "".join(out)
        cs, target = edges[rng.randrange(len(edges))]
        out.append(_sample_char(cs, rng))
        state = target


def _sample_char(cs: Charset, rng) -> str:
    if not cs.negated:
        return rng.choice(sorted(cs.chars))
    pool = [c for c in _SAMPLE_POOL if c in cs]
    return rng.choice(pool) if pool else next(chr(i) for i in range(0x21, 0x10000) if chr(i) in cs)


def _distance_to_final(dfa: Dfa) -> dict[int, int]:
    reverse: dict = defaultdict(list)
    for s, edges in enumerate(dfa.edges):
        for _, t in edges:
            reverse[t].append(s)
    dist = {f: 0 for f in dfa.finals}
    queue = list(dfa.finals)
    for s in queue:
        for p in reverse[s]:
            if p not in dist:
                dist[p] = dist[s] + 1
                queue.append(p)
    return dist
