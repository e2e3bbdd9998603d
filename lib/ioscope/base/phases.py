"""The phases of a block I/O that the latency tools measure (enum ios_lat_phase in bpf/ioscope.h).

Kept free of numpy and rich so that the command line can validate --phase before importing them.
"""

PHASE_Q2C, PHASE_Q2D, PHASE_D2C = 0, 1, 2
PHASES = {"q2c": PHASE_Q2C, "q2d": PHASE_Q2D, "d2c": PHASE_D2C}
PHASE_NAMES = {v: k for k, v in PHASES.items()}
NR_PHASES = 3

PHASE_TITLES = {
    "q2c": "queue to completion (total)",
    "q2d": "queue to issue (scheduler and queueing)",
    "d2c": "issue to completion (device)",
}
