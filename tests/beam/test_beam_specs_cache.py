"""The suite's per-class cache of Beam's DoFn state and timer specs (`_beam_specs`) gives what Beam computes."""

from __future__ import annotations

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.transforms import userstate
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer

from _beam_specs import cache_dofn_specs

BAG = BagStateSpec("seen", VarIntCoder())
TIMER = TimerSpec("flush", beam.TimeDomain.WATERMARK)


class _Stateful(beam.DoFn):
    def process(self, element, seen=beam.DoFn.StateParam(BAG), flush=beam.DoFn.TimerParam(TIMER)):
        yield element

    @on_timer(TIMER)
    def _flush(self):
        yield 0


class _Holder:
    def count(self, element, seen=beam.DoFn.StateParam(BAG)):
        yield element


def test_specs_are_cached_and_equal_beams():
    cache_dofn_specs()
    uncached = userstate.get_dofn_specs.uncached
    for dofn in (_Stateful(), _Stateful(), beam.Map(lambda x: x).dofn):
        assert userstate.get_dofn_specs(dofn) == uncached(dofn)
    assert userstate.get_dofn_specs(_Stateful()) == ({BAG}, {TIMER})


def test_an_instance_holding_a_bound_method_is_looked_at_itself():
    cache_dofn_specs()
    plain = beam.Map(lambda x: x).dofn
    assert userstate.get_dofn_specs(plain) == (set(), set())
    holding = beam.ParDo(_Holder().count).dofn
    assert type(holding) is type(plain), "both are Beam's CallableWrapperDoFn"
    assert userstate.get_dofn_specs(holding) == ({BAG}, set()), "the class's cached specs must not hide the instance's"


def test_a_cached_result_cannot_be_changed_by_a_caller():
    cache_dofn_specs()
    states, _ = userstate.get_dofn_specs(_Stateful())
    states.clear()
    assert userstate.get_dofn_specs(_Stateful()) == ({BAG}, {TIMER})
