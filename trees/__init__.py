"""The tree rankers: one pipeline, one module (or small package) per backend.

- the pipeline every backend runs through: `tree_run` (a run's search, choice on vali, scores,
  report and bundle), `tree_fit` (the same on in-memory splits), `fitted` (`FittedTrees`, the
  vali-best fit in memory) and `tuning` (a searched backend's shared keys, `SearchOptions`);
- the backends: `lightgbm` (LightGBM, its paper grid and search, its PCA and pseudo-label
  variants, its model text, scorer, raw-threshold export and parameter aliases, and
  `lightgbm.hybrid`, gbdt-ssl: LightGBM on pretrained embeddings), `catboost`, `xgboost`;
  `backends` registers the one-module backends (`TREE_BACKENDS`: CatBoost, XGBoost).

Below `baselines` (whose config holds each backend's section and whose `run` dispatches
``./run.sh baseline <name>``), above `finetune` (gbdt-ssl embeds with a pretrained encoder).
"""
