"""A house-price regression as tutorials write it, with the scaling step forgotten: four raw features (income in
10k$, age in years, rooms and population counts in the thousands) and prices in dollars go straight into a small
Sequential model trained with Keras's default SGD. The first steps overshoot by orders of magnitude and a MatMul
overflows at step 2. No op is wrong and 0.01 is the usual rate: the inputs' scale is what to change."""
import keras
import numpy as np

from pyadapter import NanGuard

rng = np.random.default_rng(42)
n = 4000
median_income = rng.uniform(0.5, 15.0, n)
house_age = rng.integers(1, 52, n).astype(float)
total_rooms = rng.uniform(100, 12000, n)
population = rng.uniform(50, 8000, n)
X = np.column_stack([median_income, house_age, total_rooms, population]).astype("float32")
y = (40000 * median_income + 500 * house_age + rng.normal(0, 20000, n)).astype("float32")

model = keras.Sequential([  # CHANGE: a Normalization layer adapted to X goes first
    keras.layers.Dense(32, activation="relu", input_shape=(4,)),
    keras.layers.Dense(1),
])
model.compile(optimizer="sgd", loss="mse", metrics=["mae"])
model.fit(X, y, epochs=5, batch_size=32, validation_split=0.1, verbose=0, callbacks=[NanGuard("captures")])
