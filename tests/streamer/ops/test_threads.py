"""Thread counts are applied from configuration and reported as in force; None leaves a library alone."""

from __future__ import annotations

import cv2

from streamer.ops.threads import ThreadConfig, apply_thread_config


def test_thread_config_sets_and_reports_opencv_threads_and_none_leaves_it():
    import torch

    before, before_torch = cv2.getNumThreads(), torch.get_num_threads()
    try:
        assert apply_thread_config(ThreadConfig(cv2=1))["cv2"] == 1 == cv2.getNumThreads()
        assert apply_thread_config(ThreadConfig())["cv2"] == 1          # None: left as it is
        got = apply_thread_config(ThreadConfig(torch=1))
        assert got["torch"] == 1 == torch.get_num_threads()
    finally:
        cv2.setNumThreads(before)
        torch.set_num_threads(before_torch)
