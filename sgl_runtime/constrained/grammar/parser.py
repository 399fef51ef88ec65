"""A value-free LALR driver over lark's parse table: parser states as hashable stacks.

`LalrStacks.feed(stack, terminal)` returns the stack after the reductions and the shift that
lark's `ParserState.feed_token` would perform, or None where lark raises `UnexpectedToken`.
Stacks are tuples, so they key caches directly; `accepted(stack)` is the set of terminals that
truly advance the parser (the reductions are simulated, as in lark's `InteractiveParser.accepts`).

With `default_reductions`, a state whose every action is the same reduction is reduced at once
after each shift (what any lookahead would do), so the stack's top state, whose terminals make
the next token's lexer context, is one that shifts: its context holds only the terminals of that
position, not the union of lookaheads LALR merges into a shared completed rule (generated JSON
Schema grammars rely on this; a lark grammar keeps lark's contexts).

A table built with conflicts kept (grammar/forking.py: `table.forks`) is followed with
`feed_all`, which returns one stack per way the terminal can be taken; `feed` then refuses to
choose. With default reductions, such a table's states that never shift but reduce by several
rules (`reduce_only`: which one, the lookahead would tell) are reduced each way at once, so a
stack never rests where the next token would be lexed in two alternatives' merged context.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Optional

from lark.parsers.lalr_analysis import Shift

from sgl_runtime.constrained.errors import ConstraintError

END = "$END"
SHIFT = "shift"  # feed_marked: where the terminal is shifted
Stack = tuple
MAX_FORK_STEPS = 10_000  # actions one feed_all may take through a forking table's conflicts


class LalrStacks:
    """Feeds terminal names to LALR stacks built from a `lark.Lark` (parser="lalr")."""

    def __init__(self, parser, start: str = "start", cache_size: int = 65536, default_reductions: bool = False) -> None:
        table = parser.parser.parser.parser.parse_table
        self.states = table.states  # {state: {symbol: (action, arg)}}
        self.start = start
        self.end_state = table.end_states[start]
        self.forks: dict = getattr(table, "forks", {})  # {state: {terminal: (action, ...)}}
        self.uniform: dict = {}  # state -> the reduction it makes on any lookahead (default_reductions)
        self.reduce_only: dict = {}  # state -> its reductions, where a forking table's state never shifts
        if default_reductions:
            for state, row in self.states.items():
                actions = {id(arg) for kind, arg in row.values() if kind is not Shift}
                if hasattr(table, "forks") and (state in self.forks or len(actions) > 1):
                    options = [*row.values(), *(a for choice in self.forks.get(state, {}).values() for a in choice)]
                    rules = tuple({id(arg): arg for _, arg in options}.values())
                    if all(kind is not Shift for kind, _ in options) and all(r.origin.name != start for r in rules):
                        self.reduce_only[state] = rules
                    if state in self.forks or state in self.reduce_only:
                        continue
                if row and len(actions) == 1 and all(kind is not Shift for kind, _ in row.values()):
                    rule = next(iter(row.values()))[1]
                    if rule.origin.name != start:
                        self.uniform[state] = rule
        self.forking = bool(self.forks or self.reduce_only)  # fed with feed_all only
        self.initial: Stack = self._settle([table.start_states[start]])
        self._accepted: OrderedDict = OrderedDict()
        self._cache_size = cache_size

    def feed(self, stack: Stack, terminal: str) -> Optional[Stack]:
        """The stack after `terminal` (name), or None when the parser rejects it."""
        return self._feed(stack, terminal, None, None)

    def feed_all(self, stack: Stack, terminal: str, marks: Optional[dict] = None) -> list:
        """Every stack after `terminal` ([] when the parser rejects it), one per way through the
        conflicts of a forking table; with `marks`, (stack, events) pairs as `feed_marked` gives."""
        if not self.forking:
            if marks is None:
                st = self._feed(stack, terminal, None, None)
                return [] if st is None else [st]
            fed = self.feed_marked(stack, terminal, marks)
            return [] if fed is None else [fed]
        out: dict = {}
        states, forks = self.states, self.forks
        todo: list = [(list(stack), [], None)]  # (stack, events, the action to take first)
        steps = MAX_FORK_STEPS
        while todo:
            st, events, action = todo.pop()
            while True:  # one way, in place; other actions of a conflict wait in `todo`
                steps -= 1
                if steps < 0:
                    raise ConstraintError(
                        f"the grammar's conflicts on {terminal} lead to more than {MAX_FORK_STEPS} reductions"
                    )
                if action is None:
                    options = forks.get(st[-1], {}).get(terminal) if forks else None
                    if options is None:
                        action = states[st[-1]].get(terminal)
                        if action is None:
                            break
                    else:
                        action = options[0]
                        todo.extend((list(st), list(events), other) for other in options[1:])
                kind, arg = action
                action = None
                if kind is Shift:
                    st.append(arg)
                    if marks is not None:
                        events.append(SHIFT)
                    for done in self._settle_all(st, marks, events):
                        out.setdefault(done, None)
                    break
                if arg.expansion:
                    del st[-len(arg.expansion) :]
                st.append(states[st[-1]][arg.origin.name][1])
                if marks is not None and arg.origin.name in marks:
                    events.append(marks[arg.origin.name])
                if terminal == END and st[-1] == self.end_state:
                    out.setdefault((tuple(st), tuple(events)), None)
                    break
        return list(out) if marks is not None else list(dict.fromkeys(st for st, _ in out))

    def feed_marked(self, stack: Stack, terminal: str, marks: dict) -> Optional[tuple[Stack, tuple]]:
        """`feed`, and what happened on the way: `marks[rule name]` for each reduction of a marked
        rule and SHIFT where the terminal is shifted, in order (None when the parser rejects it)."""
        events: list = []
        st = self._feed(stack, terminal, marks, events)
        return None if st is None else (st, tuple(events))

    def _feed(self, stack: Stack, terminal: str, marks: Optional[dict], events: Optional[list]) -> Optional[Stack]:
        if self.forking:
            raise ConstraintError("a forking grammar table is fed with feed_all")
        states = self.states
        st = list(stack)
        while True:
            action = states[st[-1]].get(terminal)
            if action is None:
                return None
            kind, arg = action
            if kind is Shift:
                st.append(arg)
                if events is not None:
                    events.append(SHIFT)
                return self._settle(st, marks, events)
            size = len(arg.expansion)
            if size:
                del st[-size:]
            st.append(states[st[-1]][arg.origin.name][1])
            if marks is not None and arg.origin.name in marks:
                events.append(marks[arg.origin.name])
            if terminal == END and st[-1] == self.end_state:
                return tuple(st)

    def _advances(self, stack: Stack, terminal: str) -> bool:
        """Whether `feed(stack, terminal)` succeeds: its reductions simulated over the states
        pushed above the part of `stack` they leave in place, without copying the stack."""
        states = self.states
        depth, pushed = len(stack), []  # stack[:depth] stays; `pushed` lies above it
        while True:
            action = states[pushed[-1] if pushed else stack[depth - 1]].get(terminal)
            if action is None:
                return False
            kind, arg = action
            if kind is Shift:
                return True
            size = len(arg.expansion)
            popped = min(size, len(pushed))
            del pushed[len(pushed) - popped :]
            depth -= size - popped
            pushed.append(states[pushed[-1] if pushed else stack[depth - 1]][arg.origin.name][1])
            if terminal == END and pushed[-1] == self.end_state:
                return True

    def _settle_all(self, st: list, marks: Optional[dict], events: list) -> list:
        """[(stack, events)] after the default reductions of `st`, where a state that only reduces,
        by one of several rules (`reduce_only`), is reduced each way: a way the next token does not
        fit dies when it is fed (an LR parser reducing early never shifts a wrong token)."""
        out, todo, steps = [], [(st, events)], MAX_FORK_STEPS
        while todo:
            st, events = todo.pop()
            steps -= 1
            if steps < 0:
                raise ConstraintError(f"the grammar's reductions without lookahead exceed {MAX_FORK_STEPS} steps")
            done = self._settle(st, marks, events if marks is not None else None)
            rules = self.reduce_only.get(done[-1])
            if rules is None:
                out.append((done, tuple(events)))
                continue
            for rule in rules:
                nxt, ev = list(done), list(events)
                if rule.expansion:
                    del nxt[-len(rule.expansion) :]
                nxt.append(self.states[nxt[-1]][rule.origin.name][1])
                if marks is not None and rule.origin.name in marks:
                    ev.append(marks[rule.origin.name])
                todo.append((nxt, ev))
        return out

    def _settle(self, st: list, marks: Optional[dict] = None, events: Optional[list] = None) -> Stack:
        """Apply the default reductions (none unless enabled) to the stack list `st`."""
        states, uniform = self.states, self.uniform
        rule = uniform.get(st[-1])
        while rule is not None:
            size = len(rule.expansion)
            if size:
                del st[-size:]
            st.append(states[st[-1]][rule.origin.name][1])
            if marks is not None and rule.origin.name in marks:
                events.append(marks[rule.origin.name])
            rule = uniform.get(st[-1])
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
        advances = self._advances if not self.forking else lambda st, t: bool(self.feed_all(st, t))
        names = frozenset(t for t in self.states[stack[-1]] if (t.isupper() or t == END) and advances(stack, t))
        self._accepted[stack] = names
        if len(self._accepted) > self._cache_size:
            self._accepted.popitem(last=False)
        return names
