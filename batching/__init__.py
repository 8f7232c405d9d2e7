"""Batching policies (PREBA bucketed dynamic batcher and baselines), knee profiles, simulator.

Pure policy: imports nothing else of Atoll, reads no clock (time is passed in by the caller).
"""

from batching.api import Batcher, Dispatch, Item, ModelSettings
from batching.buckets import BucketPolicy, ModelBatching, audio_bucket_edges, image_model
from batching.factory import BATCHERS, DEFAULT_BATCHER, BatcherSettings, make_batcher
from batching.preba import PrebaBatcher
from batching.rt_placement import RtPlacement
from batching.static import StaticBatcher
from batching.triton import TritonBatcher, TritonConfig

__all__ = [
    "BATCHERS", "DEFAULT_BATCHER", "Batcher", "BatcherSettings", "BucketPolicy", "Dispatch", "Item", "ModelBatching", "ModelSettings",
    "PrebaBatcher", "RtPlacement", "StaticBatcher", "TritonBatcher", "TritonConfig", "audio_bucket_edges",
    "image_model", "make_batcher",
]
