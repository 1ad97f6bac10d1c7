"""The fused training engine (:class:`Engine`) and the plain path fed with its noise."""

from .engine import COMPILE_MIN_NUMEL, ENGINE_FORMAT, Engine
from .layout import Layout, counter_noise
from .malloc import tune_malloc

__all__ = ["Engine", "Layout", "counter_noise", "COMPILE_MIN_NUMEL", "ENGINE_FORMAT",
           "tune_malloc"]
