"""A value-free LALR driver over lark's parse table: parser states as hashable stacks.

`LalrStacks.feed(stack, terminal)` returns the stack after the reductions and the shift that
lark's `ParserState.feed_token` would perform, or None where lark raises `UnexpectedToken`.
Stacks are tuples, so they key caches directly; `accepted(stack)` is the set of terminals that
truly advance the parser (the reductions are simulated, as in lark's `InteractiveParser.accepts`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

from lark.parsers.lalr_analysis import Shift

END = "$END"
Stack = tuple


class LalrStacks:
    """Feeds terminal names to LALR stacks built from a `lark.Lark` (parser="lalr")."""

    def __init__(self, parser, start: str = "start", cache_size: int = 65536) -> None:
        table = parser.parser.parser.parser.parse_table
        self.states = table.states  # {state: {symbol: (action, arg)}}
        self.initial: Stack = (table.start_states[start],)
        self.end_state = table.end_states[start]
        self._accepted: OrderedDict = OrderedDict()
        self._cache_size = cache_size

    def feed(self, stack: Stack, terminal: str) -> Optional[Stack]:
        """The stack after `terminal` (name), or None when the parser rejects it."""
        states = self.states
        st = list(stack)
        while True:
            action = states[st[-1]].get(terminal)
            if action is None:
                return None
            kind, arg = action
            if kind is Shift:
                st.append(arg)
                return tuple(st)
            size = len(arg.expansion)
            if size:
                del st[-size:]
            st.append(states[st[-1]][arg.origin.name][1])
            if terminal == END and st[-1] == self.end_state:
                return tuple(st)

    def accepts_end(self, stack: Stack) -> bool:
        """Whether the input may end here."""
        return END in self.accepted(stack)

    def accepted(self, stack: Stack) -> frozenset:
        """Terminal names (and `$END`) the parser accepts next from `stack`."""
        hit = self._accepted.get(stack)
        if hit is not None:
            self._accepted.move_to_end(stack)
            return hit
        names = frozenset(
            t for t in self.states[stack[-1]] if (t.isupper() or t == END) and self.feed(stack, t) is not None
        )
        self._accepted[stack] = names
        if len(self._accepted) > self._cache_size:
            self._accepted.popitem(last=False)
        return names
