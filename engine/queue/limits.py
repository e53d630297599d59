"""Numbers the queue contract and configuration validation share (one definition each).

MAX_LINGER_SECONDS: seed 000, "The ack budget" -- the linger is capped at 60 s; the contract
clamps to it on every read and config validation refuses a larger value from this same
constant. The seed sized it so collection plus one handler run fit a 30-minute ack window;
the window is now a minute kept alive by in-progress acknowledgements (contract.py), which a
collecting drain's mail receives too, and the cap stays the seed's: a drain holds its first
message unworked for the whole linger.
"""
MAX_LINGER_SECONDS = 60
MAX_BATCH_CEILING = 100
