"""combine_state_batches: Kafka's PersisterStateBatchCombiner rules, and a per-offset model."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ext.coordinator.share.state_batches import combine_state_batches
from kafka_ext.share.persister import DeliveryState, StateBatch

AVAILABLE, ACKNOWLEDGED, ARCHIVED = (DeliveryState.AVAILABLE, DeliveryState.ACKNOWLEDGED,
                                     DeliveryState.ARCHIVED)


def b(first: int, last: int, state: DeliveryState = AVAILABLE, count: int = 1) -> StateBatch:
    return StateBatch(first, last, state, count)


def test_a_written_batch_takes_its_offsets_out_of_a_stored_one() -> None:
    stored = [b(0, 9, AVAILABLE, 1)]
    assert combine_state_batches(stored, [b(3, 5, ACKNOWLEDGED, 1)]) == (
        b(0, 2), b(3, 5, ACKNOWLEDGED), b(6, 9))


def test_neighbours_of_equal_state_and_count_become_one_batch() -> None:
    assert combine_state_batches([b(0, 10)], [b(11, 20)]) == (b(0, 20),)
    assert combine_state_batches([b(0, 10)], [b(11, 20, count=2)]) == (b(0, 10), b(11, 20, count=2))


def test_batches_below_the_start_offset_go_and_the_one_it_falls_in_is_cut() -> None:
    stored = [b(0, 4), b(5, 9, ACKNOWLEDGED), b(10, 14, count=2)]
    assert combine_state_batches(stored, [], start_offset=7) == (
        b(7, 9, ACKNOWLEDGED), b(10, 14, count=2))
    assert combine_state_batches(stored, [], start_offset=15) == ()


def test_no_start_offset_keeps_everything() -> None:
    assert combine_state_batches([b(0, 4)], [], start_offset=-1) == (b(0, 4),)


def test_a_higher_delivery_count_wins_over_a_lower_one_whatever_the_order() -> None:
    """Kafka's priority: delivery count first, then state; a late, older write loses."""
    newer = b(0, 9, AVAILABLE, 2)
    older = b(0, 9, ACKNOWLEDGED, 1)
    assert combine_state_batches([newer], [older]) == (newer,)
    assert combine_state_batches([older], [newer]) == (newer,)


def test_a_terminal_state_wins_over_available_at_the_same_count() -> None:
    assert combine_state_batches([b(0, 9, ACKNOWLEDGED)], [b(0, 9, AVAILABLE)]) == (
        b(0, 9, ACKNOWLEDGED),)
    assert combine_state_batches([b(0, 9, ACKNOWLEDGED)], [b(4, 4, ARCHIVED)]) == (
        b(0, 3, ACKNOWLEDGED), b(4, 4, ARCHIVED), b(5, 9, ACKNOWLEDGED))


def test_overlapping_written_batches_are_combined_among_themselves() -> None:
    """Kafka's testNonSequentialBatchUpdates shape: batch 2 is not lost when 1 and 3 move."""
    stored = combine_state_batches([], [b(100, 109), b(110, 119, count=2), b(120, 129, count=0)])
    after = combine_state_batches(stored, [b(100, 109, ACKNOWLEDGED)])
    after = combine_state_batches(after, [b(120, 129, ACKNOWLEDGED, 1)], start_offset=110)
    assert after == (b(110, 119, count=2), b(120, 129, ACKNOWLEDGED, 1))


def test_empty_and_reversed_batches_give_nothing() -> None:
    assert combine_state_batches([], []) == ()
    assert combine_state_batches([b(5, 4)], []) == ()


# -- the model: every offset keeps the batch of the highest (count, state) -------------------

_states = st.sampled_from([AVAILABLE, DeliveryState.ACQUIRED, ACKNOWLEDGED, ARCHIVED])
_batches = st.builds(lambda first, length, state, count: b(first, first + length, state, count),
                     st.integers(0, 60), st.integers(0, 15), _states, st.integers(0, 4))


def _model(batches: list[StateBatch], start_offset: int) -> dict[int, tuple[int, int]]:
    best: dict[int, tuple[int, int]] = {}
    for batch in batches:
        for offset in range(max(batch.first_offset, start_offset), batch.last_offset + 1):
            rank = (batch.delivery_count, int(batch.delivery_state))
            best[offset] = max(best.get(offset, rank), rank)
    return best


def _per_offset(batches: tuple[StateBatch, ...]) -> dict[int, tuple[int, int]]:
    return {o: (x.delivery_count, int(x.delivery_state))
            for x in batches for o in range(x.first_offset, x.last_offset + 1)}


@settings(max_examples=300, deadline=None)
@given(stored=st.lists(_batches, max_size=6), written=st.lists(_batches, max_size=6),
       start_offset=st.sampled_from([-1, 0, 10, 30, 70]))
def test_every_offset_keeps_its_highest_batch_in_canonical_form(
        stored: list[StateBatch], written: list[StateBatch], start_offset: int) -> None:
    out = combine_state_batches(stored, written, start_offset)
    assert _per_offset(out) == _model(stored + written, max(start_offset, 0))
    for left, right in zip(out, out[1:], strict=False):
        assert left.last_offset < right.first_offset  # sorted, never overlapping
        assert not (left.last_offset + 1 == right.first_offset
                    and (left.delivery_state, left.delivery_count)
                    == (right.delivery_state, right.delivery_count))  # merged


@settings(max_examples=200, deadline=None)
@given(writes=st.lists(st.lists(_batches, max_size=4), max_size=5), data=st.data())
def test_the_result_does_not_depend_on_the_order_of_the_writes(
        writes: list[list[StateBatch]], data: st.DataObject) -> None:
    in_order: tuple[StateBatch, ...] = ()
    for w in writes:
        in_order = combine_state_batches(in_order, w)
    shuffled: tuple[StateBatch, ...] = ()
    for w in data.draw(st.permutations(writes)):
        shuffled = combine_state_batches(shuffled, w)
    assert in_order == shuffled
