"""``gpusched-bench``: runs policies on a scenario of any level and reports (the app layer above the
model: it joins scenarios, policies and agents, which the model never imports)."""
