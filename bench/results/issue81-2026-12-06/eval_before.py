"""The quickstart's eval stage, as the code before issue 81's merges runs it, on /tmp/qs/base0's checkpoints."""
from babylon_rl.context import BabylonContext
from babylon_rl.evaluate.run import EvalOptions
from babylon_rl.quickstart import NAME, IMITATION, QuickstartOptions, _best_agents

ctx = BabylonContext.create("/tmp/qs/base0")
o = QuickstartOptions()
result = ctx.evaluate(EvalOptions(model=f"{NAME}@best", dataset=NAME, imitation=f"{IMITATION}@best", seed=o.seed, device=o.device,
                                  best_agents=_best_agents(ctx), max_decisions_per_window=o.eval_decisions_per_window, menu_shares=o.shares))
