"""A churn model with leave-one-out target encoding in a hand-written K-fold loop, as Kaggle notebooks write it:
each training fold's categories are encoded by the mean target of the other rows of the same category. A region
seen once in a training fold has no other row: (sum - y) / (count - 1) is 0 / 0, a NaN pandas keeps silently, and
that fold's fit goes NaN at the batch holding the row. The CSV has no missing field: the encoding makes the NaN."""
import keras
import numpy as np
import pandas as pd

from pyadapter import NanGuard

SEED = 2005
keras.utils.set_random_seed(SEED)

data = pd.read_csv("churn.csv")


def loo_target_encode(train, valid, col, target="churn"):
    """Leave-one-out mean target per category for train rows, full mean for valid rows."""
    stats = train.groupby(col)[target].agg(["sum", "count"])
    s = train[col].map(stats["sum"])
    n = train[col].map(stats["count"])
    train_enc = (s - train[target]) / (n - 1)  # CHANGE: a category seen once divides 0 by 0
    valid_enc = valid[col].map(stats["sum"] / stats["count"]).fillna(train[target].mean())
    return train_enc, valid_enc


num_cols = ["tenure_months", "monthly_spend", "n_orders", "support_calls"]
N_FOLDS = 3
folds = np.array_split(np.random.RandomState(SEED).permutation(len(data)), N_FOLDS)
for k in range(N_FOLDS):
    tr_idx = np.concatenate([folds[j] for j in range(N_FOLDS) if j != k])
    tr, va = data.iloc[tr_idx].copy(), data.iloc[folds[k]].copy()
    for col in ["region", "plan"]:
        tr[col + "_te"], va[col + "_te"] = loo_target_encode(tr, va, col)
    mu, sd = tr[num_cols].mean(), tr[num_cols].std()
    tr[num_cols] = (tr[num_cols] - mu) / sd
    va[num_cols] = (va[num_cols] - mu) / sd
    feats = num_cols + ["region_te", "plan_te"]
    model = keras.Sequential(
        [keras.Input((len(feats),)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1, activation="sigmoid")]
    )
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="binary_crossentropy")
    model.fit(
        tr[feats].values.astype("float32"),
        tr["churn"].values,
        validation_data=(va[feats].values.astype("float32"), va["churn"].values),
        epochs=2,
        batch_size=128,
        verbose=0,
        callbacks=[NanGuard("captures")],
    )
