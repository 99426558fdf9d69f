"""The time model: what a collective would take on real Neuron hardware.

It prices exactly the schedule the executor runs (the same ``schedule_for``, the
same routing as ``router.lower``) with the catalog's link figures. Pure: no MPI.

    >>> from neuron_mpi.model import predict
    >>> p = predict("all_reduce", 64 << 20, instance="trn2.48xlarge")
    >>> p.time_us, p.busbw, p.algorithm

See docs/model.md for the rules, parameters, sources and closed-form checks.
"""
from .cost import Cost, price
from .predict import (Prediction, group_view, parameters, predict, predict_groups,
                      predict_workload, price_record)
from ..schedule import CallRecord
from .workload import OPS, Workload, bus_factor, canonical_op

__all__ = ["CallRecord", "Cost", "price", "price_record", "Prediction", "group_view",
           "parameters", "predict", "predict_groups", "predict_workload", "OPS", "Workload", "bus_factor", "canonical_op"]
