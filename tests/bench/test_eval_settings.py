"""`--set NAME=VALUE` on the evals (bench/evals/_settings.py): the product's own configurations, each field
parsed as its type, a wrong name or value refused with the name said, and the command line reaching the
configuration the eval runs."""

from __future__ import annotations

import argparse

import pytest

from bench.evals import edits, fusion
from bench.evals._settings import overridden
from engines.edit_plan import EditConfig
from streamer.pipeline.stages.fusion import FusionConfig


def test_each_field_is_parsed_as_its_type():
    config, over = overridden(FusionConfig(), ["relight_sigma=0.25", "blend_levels=2", "shape_weight=1"])
    assert (config.relight_sigma, config.blend_levels, config.shape_weight) == (0.25, 2, 1.0)
    assert isinstance(config.blend_levels, int) and isinstance(config.shape_weight, float)
    assert over == {"relight_sigma": 0.25, "blend_levels": 2, "shape_weight": 1.0}
    assert overridden(FusionConfig(), []) == (FusionConfig(), {})


@pytest.mark.parametrize("setting,said", [("relight_sigmaa=0.2", "no field 'relight_sigmaa'"),
                                          ("relight_sigma", "no field 'relight_sigma'"),
                                          ("blend_levels=2.5", "expected int"),
                                          ("relight_sigma=wide", "expected float")])
def test_a_wrong_name_or_value_is_refused_with_the_name(setting, said):
    with pytest.raises(SystemExit, match=said):
        overridden(FusionConfig(), [setting])


def test_the_command_line_reaches_the_configuration_each_eval_runs():
    parser = argparse.ArgumentParser()
    fusion.add_arguments(parser)
    config, over = fusion.config_of(parser.parse_args(["--shape-weight", "0.8", "--set", "relight_sigma=0.2",
                                                       "--set", "erode=0.02"]))
    assert config == FusionConfig(shape_weight=0.8, relight_sigma=0.2, erode=0.02)
    assert over == {"shape_weight": 0.8, "relight_sigma": 0.2, "erode": 0.02}
    parser = argparse.ArgumentParser()
    edits.add_arguments(parser)
    args = parser.parse_args(["--set", "detail_cap_px=60", "--set", "slim_shift=0.2"])
    assert edits.config_from(args.set) == EditConfig(detail_cap_px=60.0, slim_shift=0.2)
