# The offline quick start: the CPU shape of config/shakespeare_char.py on a generated play (nothing to
# download), a few minutes on a laptop CPU. Try --query_mode=residual_gelu.
#   python data/synthetic_char/prepare.py && python train.py config/quickstart.py
from config.shakespeare_char import *  # noqa: F401,F403

out_dir = "out-quickstart"
dataset = "synthetic_char"
# vocab_size stays shakespeare_char's 65: the play has 54 characters (prepare.py prints it), so ids 54-64 are
# never seen. Kept so that the quick start and the miniature (config/mini_*.py) give the numbers recorded in
# README and docs/miniature.md; --vocab_size=54 gives a model of the play's own alphabet.
# float32 on every machine, so the quick start and the miniature (config/mini_*.py) give the numbers the
# README and docs/miniature.md quote anywhere (dtype='auto' chooses per machine).
dtype = "float32"
