"""A live grid exchange: the trading layer of Stößer's market architecture (Stößer 2009, ch. 2).

Providers join with nodes (CPU, memory), users submit multi-attribute requests and providers
offers (the bid language of Stößer 2009, section 3.4.1); every period the exchange clears the
open book with a mechanism of :mod:`marketsched.mechanisms.clearing`, turns each match into a
contract with SLA terms, runs the contract's job on its provider inside its window, and settles
price or penalty in a double-entry ledger. See docs/exchange.md.

Modules: :mod:`.orders` (validation of the bid language), :mod:`.store` (the SQLite database),
:mod:`.book` (open orders to an order book and back: the clearing), :mod:`.core` (the
exchange: clock, periods, execution, SLA monitoring, billing), :mod:`.providers` (executors
behind providers), :mod:`.replay` (re-clearing a recorded session offline), :mod:`.cli`.
"""
