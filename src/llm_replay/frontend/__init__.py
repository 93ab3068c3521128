"""The front-end kit: what a trainer integration writes around `methods.host.ReplayHost`, once.

A trainer hosts a replay method through `ReplayHost` (build, capabilities, `round`/`after_step`,
save/load). Around the host every integration also needs the same six pieces, and TRL and verl
each wrote all six, differently in detail. They live here, trainer-agnostic, so an integration is
the trainer's own subclass or hook plus one module of glue:

- `settings`: the method (or a recipe) and its knobs from a mapping, a JSON string or an
  OmegaConf node, recipes resolved once, every check naming its field;
- the capability answers are the host's (`ReplayHost.reads_behaviour`: one rule for who needs
  the behaviour log-probs);
- `meter`: the μ meter's counts for a generated round and a trained batch;
- `metric_map`: a declared map from the trainer's metric names to the step signals, and
  `hooks` to hear them (and a step's times) from a trainer that keeps them to itself;
- `checkpoint`: the host's state, the meter and the front end's counters saved and resumed
  together, with the refusals a resume under other settings needs;
- `padded`: rows to and from the padded layout of Hugging Face trainers;
- `payloads`: the trainer's own fields of each row, kept beside the table until no table holds
  the row's group, saved without pickle; `clock`: versions in optimizer steps for a trainer
  that counts its own; `tasks`: a dataset column naming each row's task; `stages`: AR3PO's
  adaptive rounds through the trainer's own generate-and-score; `token_control`:
  Clip-Cov, KL-Cov and W-REINFORCE inside a trainer's own loss; `advantage_book`: the method's
  advantages by row id, for a trainer that computes them again in a step of its own.
"""
