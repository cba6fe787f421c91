"""Rollouts from inside training (TRL's GRPOTrainer); the public face is `app.trl`."""
