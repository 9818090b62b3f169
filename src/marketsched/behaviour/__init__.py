"""Bidding behaviour: strategies mapping true types to reported bids (see :mod:`.bidding`)."""

from marketsched.behaviour.bidding import (
    BEHAVIOURS,
    ShadingDraws,
    draw_shading,
    make_bids,
    shade,
    srg_bids,
    truthful,
)

__all__ = ["BEHAVIOURS", "ShadingDraws", "draw_shading", "make_bids", "shade", "srg_bids", "truthful"]
