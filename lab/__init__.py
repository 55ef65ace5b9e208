"""The CPU laboratory: the synthetic worlds a tiny policy learns on, their scripted expert, the
experiments' configs and the probes, apart from the paper's code and configs.

- `lab.world`: the worlds (entities, pages, questions and their CaRR records), the scripted
  expert, a world's restricted output vocabulary;
- `lab.tasks`: the task source the jobs load by name (`data.source="lab.tasks"`, with its `world`
  section: `lab.configs.lab_config`), its held-out subsets (`lab.metrics`);
- `lab.configs`: the experiments (`python -m carr_jax.train --config lab/configs/NAME.py`);
- `lab.probes`, `lab.expert`, `lab.make_world`, `lab.shortcut_report` (the comparison report,
  `lab.shortcuts`): the laboratory's command-line tools.

It imports the product (carr_jax, rollout, judge, configs); nothing of the product imports it.
"""
