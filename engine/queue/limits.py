"""Numbers the queue contract and configuration validation share (one definition each).

MAX_LINGER_SECONDS: seed 000, "The ack budget" -- collection plus one handler run must fit
the 30-minute ack window, so the linger is capped at 60 s; the contract clamps to it on
every read and config validation refuses a larger value from this same constant.
"""
MAX_LINGER_SECONDS = 60
MAX_BATCH_CEILING = 100
