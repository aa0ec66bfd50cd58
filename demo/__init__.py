"""The README's first command: the whole alert loop, from Redis to the runbook link."""
