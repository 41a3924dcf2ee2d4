"""The credit rule (bench/bench_credit_rule.py) at other confidence thresholds than credit.CONFIDENT.

    python rule_conf.py HOME CONFIDENT...
"""

import sys
from pathlib import Path

import babylon_rl.train.credit as credit_module

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import bench_credit_rule  # noqa: E402


def main() -> None:
    home, thresholds = sys.argv[1], [float(c) for c in sys.argv[2:]]
    sys.argv = [sys.argv[0], "--home", home]
    for threshold in thresholds:
        credit_module.CONFIDENT = threshold  # `_call` reads the module's constant
        print(f"== CONFIDENT {threshold}", flush=True)
        bench_credit_rule.main()


if __name__ == "__main__":
    main()
