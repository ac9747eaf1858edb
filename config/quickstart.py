# The offline quick start: the CPU shape of config/shakespeare_char.py on a generated play (nothing to
# download), a few minutes on a laptop CPU. Try --query_mode=residual_gelu.
#   python data/synthetic_char/prepare.py && python train.py config/quickstart.py
from config.shakespeare_char import *  # noqa: F401,F403

out_dir = "out-quickstart"
dataset = "synthetic_char"
# float32 on every machine, so the quick start and the miniature (config/mini_*.py) give the numbers the
# README and docs/miniature.md quote anywhere (dtype='auto' chooses per machine).
dtype = "float32"
