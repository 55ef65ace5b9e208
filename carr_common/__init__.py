"""What every room shares: the trajectory record's vocabulary and one HTTP retry policy.

`judge`, `rollout` and `carr_jax` all import this package; it imports none of them
(standard library only, plus httpx for the retry policy's clients).
"""
