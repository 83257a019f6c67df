"""Studies: tools that run or read many ``gpusched-bench`` and ``gpusched-train`` results and report
on them (robustness of trained agents, re-scoring of candidates, training-seed and level reports,
the PAL and EaCO reproduction studies, headroom). They sit above the apps: nothing imports them."""
