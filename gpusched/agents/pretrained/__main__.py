"""``python -m gpusched.agents.pretrained``: list, retrain (``make agents``) or ship checkpoints."""

from gpusched.agents.pretrained import main

main()
