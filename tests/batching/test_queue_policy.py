"""Triton's queue policies as documented (docs/user_guide/batcher.md, "Priority Levels" and "Queue
Policy"; model_config.proto, `ModelQueuePolicy`: "allow_timeout_override ... individual requests can
set a timeout that is less than the default timeout value but may not increase the timeout")."""

import pytest
from batching import Item, image_model, make_batcher
from batching.queue_policy import QueuePolicies, QueuePolicy, QueuePolicyError, read_policies


def test_max_queue_size_bounds_the_queue_and_zero_bounds_nothing():
    assert [QueuePolicy(max_queue_size=2).admits(n) for n in (0, 1, 2, 3)] == [True, True, False, False]
    assert QueuePolicy().admits(10**6)


def test_a_request_may_only_shorten_its_timeout_and_only_where_allowed():
    fixed = QueuePolicy(default_timeout_microseconds=1000)
    assert fixed.timeout_us(10) == 1000  # no override allowed
    allowed = QueuePolicy(default_timeout_microseconds=1000, allow_timeout_override=True)
    assert (allowed.timeout_us(10), allowed.timeout_us(5000), allowed.timeout_us(0)) == (10, 1000, 1000)
    unbounded = QueuePolicy(allow_timeout_override=True)  # default 0: no timeout, any request's is shorter
    assert (unbounded.timeout_us(0), unbounded.timeout_us(250)) == (0, 250)
    assert unbounded.timed_out_at(2.0, 250) == pytest.approx(2.00025) and QueuePolicy().timed_out_at(2.0) is None


def test_levels_default_and_per_level_policies():
    p = read_policies({"priority_levels": 3, "default_priority_level": 2,
                       "default_queue_policy": {"max_queue_size": 4},
                       "priority_queue_policy": [{"key": 1, "value": {"timeout_action": "DELAY",
                                                                      "default_timeout_microseconds": 100}}]})
    assert [p.level(r) for r in (0, 1, 3, 4)] == [2, 1, 3, 2]  # none, or beyond the levels: the default
    assert p.of(1).timeout_action == "DELAY" and p.of(2).max_queue_size == 4 and p.of(3) == p.of(2)
    json_form = read_policies({"priority_levels": "3", "default_priority_level": "2",
                               "priority_queue_policy": {"1": {"default_timeout_microseconds": "100",
                                                               "timeout_action": "DELAY"}}})  # fmt: skip
    assert json_form.of(1) == p.of(1)
    assert read_policies(p.config() | {"default_priority_level": 2}) == p  # the config endpoint's form reads back


@pytest.mark.parametrize("batching", [
    {"priority_levels": 2, "default_priority_level": 3},
    {"priority_levels": 2, "default_priority_level": 1, "priority_queue_policy": {"5": {}}},
    {"default_queue_policy": {"timeout_action": "DROP"}},
    {"default_queue_policy": {"max_queue_size": -1}},
])  # fmt: skip
def test_contradictions_are_refused(batching):
    with pytest.raises(QueuePolicyError):
        read_policies(batching)
    assert QueuePolicies().level(7) == 7  # without levels a request keeps its own (1: real-time)


def test_preba_queues_a_higher_level_ahead_and_times_out_by_the_oldest():
    """batcher.md, "Priority Levels": "requests with higher priority are allowed to bypass requests
    with lower priority. Requests at the same priority level are processed in order." """
    b = make_batcher("preba", {"cpu0": "cpu"}, lambda *a: 0.01, policies={"m": image_model(2, 0.005)})
    for i, level in enumerate((3, 3, 2, 1, 2)):
        b.add(Item(i, "m", 1.0, arrival=0.001 * i, level=level), 0.001 * i)
    # level 1, then level 2 in arrival order, then level 3
    assert [[item.id for item in d.items] for d in b.poll(0.004)] == [[3, 2], [4, 0]]
    b.on_complete("cpu0", 0.01)
    b.on_complete("cpu0", 0.02)
    assert b.next_deadline() == pytest.approx(0.001 + 0.005)  # the item left: its arrival plus Time_queue
