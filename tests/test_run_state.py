"""The run state table itself: every state is reachable from starting, every live state can
fail, and the states nobody drives are the ones with an outcome."""

from __future__ import annotations

from nodeprov.runs import TRANSITIONS, RunState
from nodeprov.runs.state import LIVE_STATES, sources


def test_every_state_is_reachable_from_starting() -> None:
    seen, frontier = {RunState.STARTING}, [RunState.STARTING]
    while frontier:
        for target in TRANSITIONS[frontier.pop()]:
            if target not in seen:
                seen.add(target)
                frontier.append(target)
    assert seen == set(RunState)


def test_live_states_can_fail_and_only_the_others_have_an_outcome() -> None:
    for state in RunState:
        assert state.live is (state in LIVE_STATES)
        assert (state.outcome is None) is state.live
        if state.live:
            assert RunState.FAILED in TRANSITIONS[state]
    assert TRANSITIONS[RunState.FINISHED] == frozenset()
    assert sources(RunState.STARTING) == {RunState.PAUSED, RunState.FAILED}  # resume
    assert sources(RunState.PAUSED) == {RunState.PAUSING}  # a pause is always settled
    assert RunState.PAUSING not in TRANSITIONS[RunState.FINISHING]  # too late to pause
