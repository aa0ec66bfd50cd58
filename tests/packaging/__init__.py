"""What ships: the wheel's contents and dependencies, and each package's public names."""
