"""What a run leaves on disk: checkpoints and TensorBoard metrics."""
