"""The Hugging Face hub, asked at most once per process whether it can be reached. If it does not answer
within a second, offline mode is switched on for huggingface_hub, transformers and datasets, so every hub
call after it reads the local cache only and fails at once, instead of retrying for about 30 s first.
Every place that may fall back to the hub (pretrained weights and tokenizers, evaluation data, the prepare
scripts) calls offline() first."""

import functools
import os
import socket
import sys
import threading

HOST, PORT, TIMEOUT = "huggingface.co", 443, 1.0
SWITCHES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
# Where the libraries keep the switch once imported (they read the environment at import time).
IMPORTED = (("huggingface_hub.constants", "HF_HUB_OFFLINE"), ("datasets.config", "HF_HUB_OFFLINE"))


def reachable(host: str = HOST, port: int = PORT, timeout: float = TIMEOUT) -> bool:
    """Whether a TCP connection to the hub opens within timeout seconds (name lookup included)."""
    answer = []

    def connect():
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            answer.append(True)
        except OSError:
            pass

    probe = threading.Thread(target=connect, daemon=True)  # a name lookup can hang past any socket timeout
    probe.start()
    probe.join(timeout)
    return bool(answer)


@functools.cache
def offline() -> bool:
    """True if the hub is not to be asked: offline mode set by the user, or the hub unreachable (then it is
    set here, for this process and the processes it starts)."""
    if any(os.environ.get(s, "").upper() in ("1", "ON", "YES", "TRUE") for s in SWITCHES):
        return True
    if reachable():
        return False
    for switch in SWITCHES:
        os.environ[switch] = "1"
    for module, attr in IMPORTED:
        if module in sys.modules:
            setattr(sys.modules[module], attr, True)
    print(f"{HOST} cannot be reached: offline, only local files and the Hugging Face cache are read", file=sys.stderr)
    return True
