"""A dev world: another seed's simulation, its latest half in unseen wording, to choose a recipe on without
reading any deciding seed's held-out windows."""
import sys
from babylon_rl.context import BabylonContext
from babylon_rl.quickstart import QuickstartOptions, dataset_params, START

home, seed = sys.argv[1], int(sys.argv[2])
ctx = BabylonContext.create(home)
ctx.home.ensure()
o = QuickstartOptions(seed=seed)
ctx.simulate(agents=o.agents, windows=o.windows, steps_per_window=o.steps_per_window, seed=seed, start=START,
             target="duckdb", news_strength=o.news_strength, wording=o.wording)
ctx.build()
ctx.dataset_build(dataset_params(o), force=True)
