"""Searching and choosing on validation: one room for what every searched model shares.

- the choosers: the vali argmax (`selection.select_best`, NaN lowest), the robust choice that
  keeps the simpler model unless another wins clearly (`robust_choice`), a choice cross-fitted
  over folds of the vali QGs (`crossfit`) and the vali-best k averaged (`topk`);
- a search's trials: one trial's result and the search's outcome (`trials`), every trial's
  per-QG vali kept beside the run (`trial_scores`), trials trained N at once (`trial_batches`),
  one grid point or trial finished in a folder of its own (`trial_folders`), the Optuna study
  mirrored into shared storage (`studies`), the one study loop every Optuna search runs, the
  trees' and the deep rankers' (`study_loop`), pruning (`pruning`);
- the strategies (`strategies`: ``paper-grid``, ``optuna`` (TPE), ``random``, in `SEARCHES`)
  and the Optuna driver they share (`strategies.study`).

Layer 1: it imports `core` only, so that every stage chooses through it (finetuning's epoch
loop, the lr grid and deep search of `finetune`, the trees of `baselines`, the ensemble weights
of `ensembles`, ``select`` in `sweeps`). What one method searches stays with the method: the
deep rankers' space and their trials' training (`finetune.search_config`, `finetune.search`,
`finetune.trial_pool`), LightGBM's paper grid and space (`trees.lightgbm.grid`,
`trees.lightgbm.search`), a tree backend's search keys (`trees.tuning`).
"""
