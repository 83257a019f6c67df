"""``python -m agents.pretrained``: list, retrain (``make agents``) or ship checkpoints."""

from agents.pretrained import main

main()
