"""Egg: the decentralized auction framework of Kang & Parkes (2007).

A trusted market infrastructure holds every provider's price table (admissible, definition 6)
and resource estimator (monotone, definitions 4-5); a single-use auctioneer per bid picks,
for the user, the provider and completion time maximising reported value minus listed price
(equations 3-5); payment waits in escrow until the scheduled completion time and is paid on
completion or refunded; a reliability ledger filters providers by the user's minimum
reliability. Providers run their own local schedulers on the engine (:mod:`.providers`).

Modules: :mod:`.bids` (descriptions, value schedules, bids), :mod:`.price_table`,
:mod:`.estimators`, :mod:`.auctioneer`, :mod:`.escrow`, :mod:`.market` (the infrastructure),
:mod:`.beliefs` (utilities under the paper's beliefs, misreports), :mod:`.providers`
(provider agents and the engine policy). See ``docs/egg.md``.
"""

from .auctioneer import Outcome, clear
from .bids import (
                   Bid,
                   BidBatch,
                   ConstantDeadline,
                   JobType,
                   Linear,
                   Schema,
                   Steps,
                   ValueSchedule,
                   dominates,
                   true_utility,
)
from .escrow import Escrow, EscrowError, ReliabilityLedger
from .estimators import EstimatorStore, EstimatorUpdateError, GroupedLinearEstimator, LinearEstimator
from .market import Market
from .price_table import AdmissibilityError, PriceBook, PriceTable, Violation

__all__ = [
    "Outcome", "clear", "Bid", "BidBatch", "ConstantDeadline", "JobType", "Linear", "Schema", "Steps",
    "ValueSchedule", "dominates", "true_utility", "Escrow", "EscrowError", "ReliabilityLedger",
    "EstimatorStore", "EstimatorUpdateError", "GroupedLinearEstimator", "LinearEstimator", "Market",
    "AdmissibilityError", "PriceBook", "PriceTable", "Violation",
]
