"""Multi-turn trace: lock-step ids / logprobs / rows, EOS restore, truncation, steps."""

from __future__ import annotations

import numpy as np
import pytest

from sampling_mask import ErrorCode, SamplingMask, SamplingMaskError
from sampling_mask.data.trace import TraceBuilder

EOS = 2


def _turns() -> TraceBuilder:
    builder = TraceBuilder(vocab_size=100)
    builder.add_prompt([50, 51])
    builder.add_generated([10, 11, EOS], [[10, 30], [11], [EOS, 31]], logprobs=[-0.5, -0.1, -0.2])
    return builder


def test_eos_restored_after_pending_observations_lands_on_the_eos_token():
    builder = _turns()
    builder.remove_eos(EOS)
    builder.add_observation([60, 61, 62])  # observation rows still pending at the end
    final_ids = [50, 51, 10, 11, EOS, 60, 61, 62]
    trace = builder.finalize(len(final_ids), restore_eos="last", token_ids=final_ids)
    rows = trace.mask.to_rows()
    assert trace.token_ids.tolist() == final_ids
    assert rows[final_ids.index(EOS)] == [EOS, 31]  # the EOS row sits on the EOS token
    assert rows[5:] == [[], [], []]  # observation rows on the observation tokens
    assert rows[:4] == [[], [], [10, 30], [11]]
    assert trace.logprobs[4] == pytest.approx(-0.2) and np.isnan(trace.logprobs[5:]).all()
    assert trace.generated.tolist() == [False, False, True, True, True, False, False, False]
    assert trace.mask.sampled_token_ids.tolist() == final_ids


def test_eos_between_turns_stays_removed_and_the_last_is_restored():
    builder = _turns()
    builder.remove_eos(EOS)
    builder.add_observation([60, 61])
    builder.add_generated([12, EOS], [[12], [EOS, 13]], logprobs=[-0.3, -0.4])
    builder.remove_eos(EOS)
    builder.add_observation([63])
    last = builder.finalize(9, restore_eos="last")
    assert last.token_ids.tolist() == [50, 51, 10, 11, 60, 61, 12, EOS, 63]
    assert last.mask.to_rows()[7] == [EOS, 13] and last.mask.to_rows()[8] == []
    every = builder.finalize(10, restore_eos="all")
    assert every.token_ids.tolist() == [50, 51, 10, 11, EOS, 60, 61, 12, EOS, 63]
    assert [every.mask.to_rows()[i] for i in (4, 8)] == [[EOS, 31], [EOS, 13]]
    assert every.step_bounds.tolist() == [0, 5, 10]
    assert builder.finalize(8).token_ids.tolist() == [50, 51, 10, 11, 60, 61, 12, 63]


def test_truncation_keeps_ids_logprobs_and_rows_aligned():
    builder = _turns()
    builder.add_observation([60, 61])
    builder.add_generated([12, 13, 14], [[12, 40], [13], [14, 41, 42]], logprobs=[-1.0, -2.0, -3.0])
    full = builder.finalize(10)
    builder.truncate(8)
    cut = builder.finalize(8)
    assert cut.token_ids.tolist() == full.token_ids[:8].tolist()
    np.testing.assert_array_equal(cut.logprobs, full.logprobs[:8])
    assert cut.mask.to_rows() == full.mask.to_rows()[:8]
    assert cut.mask == full.mask[:8]
    for t in np.flatnonzero(cut.mask.row_lengths > 0).tolist():  # each row still holds its own token
        assert cut.token_ids[t] in cut.mask.row(t)
    assert cut.step_bounds.tolist() == [0, 5, 8]
    builder.add_observation([70])  # still appendable after a cut
    assert builder.finalize(9).mask.to_rows()[-1] == []


def test_steps_yield_one_segment_each():
    builder = _turns()
    builder.add_observation([60])
    builder.add_generated([12], [[12, 5]], logprobs=[-0.7])
    builder.add_observation([61])  # trailing observation joins the last step
    trace = builder.finalize(8)
    steps = trace.step_mask()
    assert steps.num_segments == 2 and steps.cu_seqlens.tolist() == [0, 5, 8]
    assert steps.segment(1).to_rows() == [[], [12, 5], []]
    cumulative = trace.step_mask(cumulative=True)
    assert cumulative.cu_seqlens.tolist() == [0, 5, 13]
    assert cumulative.segment(1).to_rows() == [[], [], [], [], [], [], [12, 5], []]


def test_finalize_checks_the_count_and_the_ids():
    builder = _turns()
    with pytest.raises(SamplingMaskError) as err:
        builder.finalize(6)
    assert err.value.code is ErrorCode.E_SHAPE and err.value.field == "token_count"
    with pytest.raises(SamplingMaskError) as err:
        builder.finalize(5, token_ids=[50, 51, 10, 12, EOS])
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.row == 3


def test_generated_rows_are_checked_in_trace_coordinates():
    builder = _turns()
    with pytest.raises(SamplingMaskError) as err:
        builder.add_generated([7, 8], [[7], [9]])
    assert err.value.code is ErrorCode.E_MISSING_SAMPLED and err.value.row == 6
    with pytest.raises(SamplingMaskError) as err:
        builder.add_generated([7, 8], [[7]])
    assert err.value.code is ErrorCode.E_SHAPE
    with pytest.raises(SamplingMaskError) as err:
        builder.add_generated([7], [[7]], logprobs=[0.0, 1.0])
    assert err.value.code is ErrorCode.E_SHAPE
    assert builder.num_tokens == 5  # nothing was appended by the failed calls
    builder.add_generated([7, 8], SamplingMask.from_rows([[7, 1], []]))
    builder.add_generated([9], np.array([[9, -1]]))
    assert builder.finalize(8).mask.to_rows()[5:] == [[7, 1], [], [9]]


def test_remove_eos_misuse():
    builder = _turns()
    with pytest.raises(SamplingMaskError) as err:
        builder.remove_eos(99)
    assert err.value.code is ErrorCode.E_SCHEMA and err.value.value == EOS
    builder.add_observation([60])
    with pytest.raises(SamplingMaskError):
        builder.remove_eos()
    with pytest.raises(SamplingMaskError) as err:
        builder.truncate(99)
    assert err.value.code is ErrorCode.E_RANGE


# SkyRL's generator (NovaSky-AI/SkyRL PR #2082 @ 9a8327d7806e, skyrl/train/generators/skyrl_gym_generator.py)
# builds the support trace in these orders; each test below replays one with TraceBuilder.
def _single_turn_template(last_turn_eos: bool) -> TraceBuilder:
    """``_update_agent_loop_state_with_singleturn_chat_template``: every turn drops its EOS, then the
    observation follows; the final observation is appended too (and cut at the end)."""
    builder = _turns()
    builder.remove_eos(EOS)
    builder.add_observation([60, 61])
    if last_turn_eos:
        builder.add_generated([12, EOS], [[12], [EOS, 13]], logprobs=[-0.3, -0.4])
        builder.remove_eos(EOS)
    else:
        builder.add_generated([12, 14], [[12], [14, 13]], logprobs=[-0.3, -0.4])
    builder.add_observation([63, 64, 65])  # the final observation, never part of the response
    return builder


def test_truncate_keeps_the_removed_eos_at_the_cut():
    builder = _single_turn_template(last_turn_eos=True)
    builder.truncate(7)  # SkyRL's finalize(extra_rows=len(final obs)): cut right where the EOS sat
    final_ids = [50, 51, 10, 11, 60, 61, 12, EOS]
    trace = builder.finalize(8, restore_eos="last", token_ids=final_ids)
    rows = trace.mask.to_rows()
    assert rows[7] == [EOS, 13] and rows[4] == []  # turn 2's EOS at the end, turn 1's stays removed
    assert trace.token_ids.tolist() == final_ids and trace.generated[7]
    builder.truncate(6)  # a cut before the EOS forgets it
    assert builder.finalize(6, restore_eos="last").token_ids.tolist() == final_ids[:6]


def test_skyrl_synthetic_eos_after_a_turn_without_eos():
    # stop_reason != "length" and the response does not end with EOS: SkyRL appends an EOS whose
    # support is padding (dropped_eos_sample_support is None for the last turn).
    builder = _single_turn_template(last_turn_eos=False)
    builder.truncate(8)
    assert builder.finalize(8, restore_eos="last").token_ids.tolist() == [50, 51, 10, 11, 60, 61, 12, 14]
    builder.add_observation([EOS])
    final_ids = [50, 51, 10, 11, 60, 61, 12, 14, EOS]
    trace = builder.finalize(9, restore_eos="last", token_ids=final_ids)  # turn 1's EOS must not come back
    assert trace.mask.to_rows()[6:] == [[12], [14, 13], []]


def test_skyrl_length_stop_appends_nothing():
    builder = _single_turn_template(last_turn_eos=False)
    builder.truncate(8)
    trace = builder.finalize(8, restore_eos="last", token_ids=[50, 51, 10, 11, 60, 61, 12, 14])
    assert trace.mask.to_rows()[2:] == [[10, 30], [11], [], [], [12], [14, 13]]


def test_skyrl_multi_turn_template_keeps_every_eos():
    # _update_agent_loop_state_with_multiturn_chat_template: no EOS removal; the final observation is cut.
    builder = _turns()
    builder.add_observation([60, 61])
    builder.add_generated([12, EOS], [[12], [EOS, 13]], logprobs=[-0.3, -0.4])
    builder.add_observation([63, 64, 65])
    builder.truncate(9)
    trace = builder.finalize(9, token_ids=[50, 51, 10, 11, EOS, 60, 61, 12, EOS])
    assert [trace.mask.to_rows()[i] for i in (4, 8)] == [[EOS, 31], [EOS, 13]]
    assert trace.step_bounds.tolist() == [0, 5, 9]


def test_skyrl_added_eos_after_a_stop_string_is_padding():
    # append_eos_token_after_stop_str_in_multi_turn: the appended EOS was not sampled (padding row).
    builder = TraceBuilder(vocab_size=100)
    builder.add_prompt([50])
    builder.add_generated([10, 11], [[10, 30], [11]])
    builder.add_observation([EOS, 60])  # added EOS + observation: both padding in SkyRL's turn support
    trace = builder.finalize(5, restore_eos="last", token_ids=[50, 10, 11, EOS, 60])
    assert trace.mask.to_rows() == [[], [10, 30], [11], [], []]
    assert trace.step_mask().to_rows() == trace.mask.to_rows()  # one generation: one step


def test_generation_starts_follow_restored_eos_tokens():
    builder = _turns()
    builder.remove_eos(EOS)
    builder.add_observation([60, 61])
    builder.add_generated([12, EOS], [[12], [EOS, 13]])
    builder.remove_eos(EOS)
    builder.add_observation([63])
    assert builder.finalize(8).generation_starts.tolist() == [2, 6]
    every = builder.finalize(10, restore_eos="all")
    assert every.generation_starts.tolist() == [2, 7]
    assert every.turn_bounds.tolist() == [0, 7, 10]  # step 0 keeps its EOS and the observation after it
    assert every.step_mask(step_ends="observation").segment(0).to_rows()[4:] == [[EOS, 31], [], []]
    # a generation that held only its EOS, straight after another: its EOS stays its first token
    only = TraceBuilder(vocab_size=100)
    only.add_prompt([50])
    only.add_generated([10, EOS], [[10], [EOS]])
    only.remove_eos(EOS)
    only.add_generated([EOS], [[EOS, 7]])
    only.remove_eos(EOS)
    trace = only.finalize(4, restore_eos="all")
    assert trace.token_ids.tolist() == [50, 10, EOS, EOS] and trace.generation_starts.tolist() == [1, 3]
    assert trace.turn_bounds.tolist() == [0, 3, 4] and trace.step_bounds.tolist() == [0, 3, 4]


def test_truncation_cuts_generation_starts():
    builder = _turns()
    builder.add_observation([60, 61])
    builder.add_generated([12, 13], [[12], [13]])
    builder.truncate(6)  # the second generation begins at 7: it becomes empty at the cut
    trace = builder.finalize(6)
    assert trace.generation_starts.tolist() == [2, 6] and trace.turn_bounds.tolist() == [0, 6, 6]
    no_generation = TraceBuilder()
    no_generation.add_prompt([1, 2])
    assert no_generation.finalize(2).turn_bounds.tolist() == [0, 2]
